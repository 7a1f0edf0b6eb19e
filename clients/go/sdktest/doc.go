// Package sdktest runs the Go client's RoundTripper under the real openai-go
// SDK, against a loopback stand-in of the chat completions API and a real
// daemon. A module of its own, so that the SDK never becomes a dependency
// of the client module.
package sdktest
