// A scripted stand-in of an LLM API on loopback (node:http): each request is
// answered by the next reply of its script and recorded as it arrived.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Reply {
  readonly body: unknown;
  readonly status?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Send the body but never end the response, as an event stream the server keeps open (until close). */
  readonly open?: boolean;
}

export interface Seen {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** An OpenAI chat completion that says `content` and used 12 tokens. */
export function completion(content: string): Record<string, unknown> {
  return {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 0,
    model: "m",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 },
  };
}

/** OpenAI's error envelope. */
export function openaiError(message: string): Record<string, unknown> {
  return { error: { message, type: "invalid_request_error" } };
}

export class ScriptedAPI {
  readonly seen: Seen[] = [];
  private readonly server: Server;

  private constructor(server: Server) {
    this.server = server;
  }

  /** `{base}/v1` of the running server, as an SDK's base URL. */
  get baseURL(): string {
    const { port } = this.server.address() as AddressInfo;
    return `http://127.0.0.1:${port}/v1`;
  }

  /** Listen on a free loopback port; past the script, every request is a 500. */
  static async start(...script: Reply[]): Promise<ScriptedAPI> {
    const replies = [...script];
    let api: ScriptedAPI | undefined;
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        api?.seen.push({ method: request.method ?? "", path: request.url ?? "", headers: request.headers, body });
        const reply = replies.shift() ?? { body: openaiError("the script is over"), status: 500 };
        const text = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body);
        response.writeHead(reply.status ?? 200, { "content-type": "application/json", ...reply.headers });
        if (reply.open === true) response.write(text);
        else response.end(text);
      });
    });
    api = new ScriptedAPI(server);
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", resolve);
    });
    return api;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
