# The benchmark (bench/README.md). Included by the top-level Makefile, whose
# BIN, STAMP, GEN, JAEGER_BIN and `setup` it uses.
#
#   make bench                     every row, 10 s each, into bench/results/
#   make bench BENCH_SECONDS=5     a shorter run of every row
#   make bench BENCH_ROUNDS=5      more interleaved rounds of the goals' rows
#   make bench-smoke               seconds per row, into a .tmp file (CI)
#   make bench-core                the in-process core micro-benchmark
#   make bench-profile             flame graphs of the daemon under load (py-spy)
#   make soak                      10 minutes at half of saturation (not CI)
#   make fleet-sim                 50 pods against one failing upstream, per state store
#   make fleet-sim-scale           1,000 pods' syncs against one Redis, beside the per-call design
#   make bench-outcome             executors in 3 languages and 2 SDKs through overloads (about 15 minutes)
#   make bench-overload            the daemon's own overload: 8 to 192 callers per RPC, 50 ms deadlines
#   make bench-paced               what a dispatch costs the daemon under a declared pace (about a minute)
#   make bench-capped              a key capped at K calls in flight, shared by four executors (about 2 minutes)

BENCH_SECONDS ?= 10
BENCH_RATES   ?= 1000,5000
BENCH_ROUNDS  ?= 3
BENCH_ARGS    ?=
PROFILE_SECONDS ?= 10
SOAK_SECONDS  ?= 600
BENCH_BIN     := build/bench
BENCH_BUILT   := $(BENCH_BIN)/.built
BENCH_GO      := bench/go.mod bench/go.sum bench/executor-go/go.mod bench/executor-go/go.sum \
                 $(shell find bench clients/go -name '*.go' 2>/dev/null)
OUTCOME_ARGS  ?=
OVERLOAD_ARGS ?=
PACED_ARGS    ?=
CAPPED_ARGS   ?=
BENCH_RUN      = $(BIN)/python -m bench.run --loadgen $(BENCH_BIN)/loadgen \
                 --echo-go $(BENCH_BIN)/echo-go --jaeger $(JAEGER_BIN)

.PHONY: bench bench-smoke bench-core bench-build bench-profile soak fleet-sim fleet-sim-scale \
        bench-outcome bench-overload bench-paced bench-capped

# go vet here keeps the Go code vet-clean wherever the smoke run runs.
$(BENCH_BUILT): $(BENCH_GO)
	cd bench && go vet ./... && go build -o ../$(BENCH_BIN)/ ./loadgen ./echo-go ./upstream-go
	cd bench/executor-go && go vet ./... && go build -o ../../$(BENCH_BIN)/executor-go .
	touch $@

bench-build: $(BENCH_BUILT)

bench: setup $(JAEGER_BIN) $(BENCH_BUILT)
	$(BENCH_RUN) --seconds $(BENCH_SECONDS) --rates $(BENCH_RATES) --rounds $(BENCH_ROUNDS) \
	  --out bench/results/latest.json --summary bench/results/summary.json $(BENCH_ARGS)

# Every row once, for about a second; never touches latest.json; fails
# when a row fails to run. No timing is asserted: CI machines are too noisy.
bench-smoke: setup $(JAEGER_BIN) $(BENCH_BUILT) ts-build
	$(BENCH_RUN) --seconds 1 --warmup 0.5 --rates 1000 --rounds 1 --core-min-time 0.02 \
	  --out bench/results/smoke.json.tmp --summary bench/results/smoke-summary.json.tmp
	$(BIN)/python -m bench.outcome.run --bin $(BENCH_BIN) --capacity 10 --warm 0.5 --hot 1 --after 0.5 \
	  --only 10x,halving,anthropic-s --out bench/results/outcome-smoke.json.tmp

# Five variants x three modes, 30 s each, then the upstream's personalities and
# the SDK mode, shorter, back to back (bench/README.md).
bench-outcome: setup $(BENCH_BUILT) ts-build
	$(BIN)/python -m bench.outcome.run --bin $(BENCH_BIN) --out bench/results/outcome.json $(OUTCOME_ARGS)

# Issue 34's overload row: Admit, ReportOutcome and DecideRetry, N callers each.
bench-overload: setup $(BENCH_BUILT)
	$(BIN)/python -m bench.overload --loadgen $(BENCH_BIN)/loadgen $(OVERLOAD_ARGS)

# Issue 34's paced dispatch row: four executors at 1,000/s under a declared pace.
bench-paced: setup
	$(BIN)/python -m bench.paced $(PACED_ARGS)

# Issue 35's capped-credential row: K = 1, 4, 15, with and without the cap declared.
bench-capped: setup
	$(BIN)/python -m bench.capped $(CAPPED_ARGS)

# Issue 36's row: what squawk top, the status page and the scrapes cost the
# daemon beside 1,000 calls/s.
bench-views: setup $(BENCH_BUILT)
	$(BIN)/python -m bench.views --loadgen $(BENCH_BIN)/loadgen $(VIEWS_ARGS)

bench-core: setup
	$(BIN)/python -m bench.core

# One SVG per case into bench/results/flames/ (its README.md lists them).
# py-spy attaches to the running daemon, which needs ptrace permission.
bench-profile: setup $(JAEGER_BIN) $(BENCH_BUILT)
	$(BIN)/python -m bench.profile --loadgen $(BENCH_BIN)/loadgen --jaeger $(JAEGER_BIN) \
	  --py-spy $(BIN)/py-spy --seconds $(PROFILE_SECONDS) --out bench/results/flames

soak: setup $(BENCH_BUILT)
	$(BIN)/python -m bench.soak --loadgen $(BENCH_BIN)/loadgen --seconds $(SOAK_SECONDS) \
	  --out bench/results/soak.json

# About 80 s: three modes of 25 s each, one Redis-compatible server on loopback.
# Twice: busy pods (each reaches minimum_calls on its own) and thin ones
# (1 call/s each: no pod alone has the volume, the fleet together does).
fleet-sim: setup
	$(BIN)/python -m bench.fleet_sim --rate 10 --out bench/results/fleet_sim.json
	$(BIN)/python -m bench.fleet_sim --rate 1 --out bench/results/fleet_sim_thin.json

# The scale mode, about a minute: 1,000 pods (their calls as the counts each
# sync carries) at two call rates, and 500 pods, then the per-call design
# flat out (bench/README.md). Pass `--runs PODSxRATE,...` with FLEET_SCALE_ARGS.
FLEET_SCALE_ARGS ?=
fleet-sim-scale: setup
	$(BIN)/python -m bench.fleet_scale --out bench/results/fleet_scale.json $(FLEET_SCALE_ARGS)
