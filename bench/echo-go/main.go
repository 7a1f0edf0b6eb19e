// Command echo-go is the floor for any gRPC daemon on this machine: a bare
// grpc-go server whose one unary method answers with the request's bytes.
//
// Usage: echo-go -listen 127.0.0.1:PORT
//
// It prints "ready" on stdout once it serves and stops on SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/squawk-dev/squawk/bench/internal/raw"
)

// echoService is registered by hand (no generated code): the raw codec hands
// the handler the request's bytes, and the handler returns them.
var echoService = grpc.ServiceDesc{
	ServiceName: "squawk.bench.v1.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, decode func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := decode(&in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "host:port to listen on")
	flag.Parse()

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("echo-go: %v", err)
	}
	server := grpc.NewServer(grpc.ForceServerCodecV2(raw.Codec{}))
	server.RegisterService(&echoService, struct{}{})

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		done := make(chan struct{})
		go func() { server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			server.Stop()
		}
	}()

	fmt.Println("ready", lis.Addr())
	if err := server.Serve(lis); err != nil {
		log.Fatalf("echo-go: %v", err)
	}
}
