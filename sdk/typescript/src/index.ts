// sessiond-store: the Claude Agent SDK's SessionStore backed by sessiond.
export { SessiondStore, type SessiondStoreOptions } from "./store.js";
export {
  checkSocketFolder,
  defaultSocketPath,
  maxSocketPathBytes,
  SocketMissingError,
  UntrustedSocketError,
  type SocketPlatform,
} from "./socket.js";
export { ERROR_DOMAIN, REASON_NOT_PROCESSED, REASON_SUMMARY_CONFLICT, SessiondError } from "./errors.js";
