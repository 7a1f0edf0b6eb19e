// A loopback server answering every squawk.v1.PolicyService call with one
// gRPC status (the runner vectors' daemonAnswers cases, the throttling
// test), counting the calls it receives.
import { Server, ServerCredentials, status, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
import { PolicyServiceService } from "../../src/gen/squawk/v1/policy";

export interface Answering {
  readonly target: string;
  readonly server: Server;
  /** Calls received, by the service definition's method key ("decideRetry", "admit", ...). */
  readonly received: Map<string, number>;
}

/**
 * A loopback server answering every PolicyService call with `code` and no
 * message; with OK, each call's response with every field at its default.
 */
export async function answering(code: status): Promise<Answering> {
  const server = new Server();
  const received = new Map<string, number>();
  const impl: UntypedServiceImplementation = {};
  for (const [method, definition] of Object.entries(PolicyServiceService)) {
    // The response's defaults: what an empty message on the wire reads as.
    const empty: unknown = definition.responseDeserialize(Buffer.alloc(0));
    impl[method] = (_call: unknown, callback: (error: Partial<ServiceError> | null, response?: unknown) => void) => {
      received.set(method, (received.get(method) ?? 0) + 1);
      if (code === status.OK) callback(null, empty);
      else callback({ code, details: "scripted status" });
    };
  }
  server.addService(PolicyServiceService, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
  );
  return { target: `127.0.0.1:${port}`, server, received };
}
