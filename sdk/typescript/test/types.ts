// Compiled by `npm run typecheck` (tsc --noEmit), never run: SessiondStore
// is the SDK's SessionStore, as a user of the published package sees it.
import { query, type Options, type SessionStore } from "@anthropic-ai/claude-agent-sdk";
import { SessiondStore, UntrustedSocketError, type SessiondStoreOptions } from "sessiond-store";

const store: SessionStore = new SessiondStore();
const other: SessionStore = new SessiondStore({ socketPath: "/run/user/1000/sessiond/sessiond.sock" });
const opts: SessiondStoreOptions = { agentConfigDir: "/home/me/.cache/claude-agent" };
const configured: SessionStore = new SessiondStore(opts);

// Every optional method is there, with the SDK's signatures.
type Required<T> = { [K in keyof T]-?: T[K] };
const full: Required<SessionStore> = new SessiondStore();

const options: Options = { sessionStore: new SessiondStore() };
export const q = () => query({ prompt: "hello", options });

export function isRefused(err: unknown): boolean {
  return err instanceof UntrustedSocketError && !err.retryable && typeof err.ownerUid === "number";
}

export { store, other, configured, full };
