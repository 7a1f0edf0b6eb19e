// Helpers for the tests of the pod's upstream state: names no other test
// shares, and a DecisionSource that forwards to a real client and logs
// what the runner asked, in order.
import type { DecisionSource, ReportOutcomeInput, SquawkClient } from "../../src/index";

let made = 0;

/** An upstream name no other test (nor an earlier run against the same daemon) uses. */
export function uniqueUpstream(what: string): string {
  made += 1;
  return `${what}-${process.pid}-${made}`;
}

/** What the runner asked the pod and the policy, in order. */
export interface Asked {
  readonly events: string[];
  readonly reports: ReportOutcomeInput[];
}

/** `client` as the runner's source, logging each admission, decision and report into `asked`. */
export function logged(client: SquawkClient, asked: Asked): DecisionSource {
  return {
    fallbackProfile: client.fallbackProfile,
    async admit(input, options) {
      const admission = await client.admit(input, options);
      asked.events.push(`admit ${admission.allowed ? "allowed" : admission.reason}`);
      return admission;
    },
    async decideRetry(input, options) {
      const decision = await client.decideRetry(input, options);
      asked.events.push(`decide ${decision.action}`);
      return decision;
    },
    async reportOutcome(input, options) {
      asked.events.push("report");
      asked.reports.push(input);
      return client.reportOutcome(input, options);
    },
  };
}
