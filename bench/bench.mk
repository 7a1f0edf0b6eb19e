# The benchmark (bench/README.md). Included by the top-level Makefile, whose
# BIN, STAMP, GEN, JAEGER_BIN and `setup` it uses.
#
#   make bench                     every row, 10 s each, into bench/results/
#   make bench BENCH_SECONDS=5     a shorter run of every row
#   make bench-smoke               seconds per row, into a .tmp file (CI)
#   make bench-core                the in-process core micro-benchmark
#   make soak                      10 minutes at half of saturation (not CI)

BENCH_SECONDS ?= 10
BENCH_RATES   ?= 1000,5000
BENCH_ARGS    ?=
SOAK_SECONDS  ?= 600
BENCH_BIN     := build/bench
BENCH_BUILT   := $(BENCH_BIN)/.built
BENCH_GO      := bench/go.mod bench/go.sum $(shell find bench -name '*.go' 2>/dev/null)
BENCH_RUN      = $(BIN)/python -m bench.run --loadgen $(BENCH_BIN)/loadgen \
                 --echo-go $(BENCH_BIN)/echo-go --jaeger $(JAEGER_BIN)

.PHONY: bench bench-smoke bench-core bench-build soak

# go vet here keeps the Go code vet-clean wherever the smoke run runs.
$(BENCH_BUILT): $(BENCH_GO)
	cd bench && go vet ./... && go build -o ../$(BENCH_BIN)/ ./loadgen ./echo-go
	touch $@

bench-build: $(BENCH_BUILT)

bench: setup $(JAEGER_BIN) $(BENCH_BUILT)
	$(BENCH_RUN) --seconds $(BENCH_SECONDS) --rates $(BENCH_RATES) \
	  --out bench/results/latest.json --summary bench/results/summary.json $(BENCH_ARGS)

# Every row for about a second; never touches latest.json; fails when a
# row fails to run. No timing is asserted: CI machines are too noisy.
bench-smoke: setup $(JAEGER_BIN) $(BENCH_BUILT)
	$(BENCH_RUN) --seconds 1 --warmup 0.5 --rates 1000 --core-min-time 0.02 \
	  --out bench/results/smoke.json.tmp --summary bench/results/smoke-summary.json.tmp

bench-core: setup
	$(BIN)/python -m bench.core

soak: setup $(BENCH_BUILT)
	$(BIN)/python -m bench.soak --loadgen $(BENCH_BIN)/loadgen --seconds $(SOAK_SECONDS) \
	  --out bench/results/soak.json
