// Errors the adapter throws for the daemon's answers.

import { BinaryReader } from "@bufbuild/protobuf/wire";
import { status as Status, type ServiceError } from "@grpc/grpc-js";

/** The ErrorInfo domain of sessiond's error details (api/proto/sessiond/v1/errors.go). */
export const ERROR_DOMAIN = "sessiond";
/** UNAVAILABLE before the request was looked at (the daemon is draining). */
export const REASON_NOT_PROCESSED = "NOT_PROCESSED";
/** ABORTED: the summary was folded from a version the session no longer has. */
export const REASON_SUMMARY_CONFLICT = "SUMMARY_CONFLICT";

/**
 * SessiondError is a refusal or failure reported by sessiond (or by gRPC on
 * the way to it). message is the daemon's own message, prefixed with the
 * operation; code is the gRPC status code.
 */
export class SessiondError extends Error {
  override readonly name = "SessiondError";
  constructor(
    message: string,
    /** The gRPC status code (google.rpc.Code numbering). */
    readonly code: Status,
    /** The ErrorInfo reason when the daemon gave one in the "sessiond" domain. */
    readonly reason: string | undefined,
    /** The daemon's message alone. */
    readonly details: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** The status code's name, e.g. "INVALID_ARGUMENT". */
  get codeName(): string {
    return Status[this.code] ?? String(this.code);
  }
}

export function isServiceError(err: unknown): err is ServiceError {
  return (
    err instanceof Error &&
    typeof (err as Partial<ServiceError>).code === "number" &&
    typeof (err as Partial<ServiceError>).details === "string"
  );
}

/** toSessiondError wraps a gRPC failure of operation op. */
export function toSessiondError(op: string, err: ServiceError): SessiondError {
  const reason = errorReason(err);
  const details = err.details || err.message;
  const codeName = Status[err.code] ?? String(err.code);
  return new SessiondError(`sessiond ${op}: ${details} (${codeName})`, err.code, reason, details, { cause: err });
}

/**
 * errorReason reads the google.rpc.ErrorInfo reason of the "sessiond" domain
 * from the grpc-status-details-bin trailer, if there is one.
 */
export function errorReason(err: ServiceError): string | undefined {
  const bins = err.metadata?.get("grpc-status-details-bin") ?? [];
  for (const bin of bins) {
    if (typeof bin === "string") continue;
    try {
      for (const info of decodeStatusErrorInfos(bin)) {
        if (info.domain === ERROR_DOMAIN && info.reason !== "") return info.reason;
      }
    } catch {
      // A trailer we cannot decode carries no reason.
    }
  }
  return undefined;
}

const ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo";

// decodeStatusErrorInfos decodes google.rpc.Status {code = 1; message = 2;
// repeated google.protobuf.Any details = 3} and returns the ErrorInfo
// {reason = 1; domain = 2; metadata = 3} among its details.
function decodeStatusErrorInfos(buf: Uint8Array): { reason: string; domain: string }[] {
  const out: { reason: string; domain: string }[] = [];
  const r = new BinaryReader(buf);
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field !== 3 || wire !== 2) {
      r.skip(wire);
      continue;
    }
    const any = new BinaryReader(r.bytes());
    let typeUrl = "";
    let value: Uint8Array | undefined;
    while (any.pos < any.len) {
      const [f, w] = any.tag();
      if (f === 1 && w === 2) typeUrl = any.string();
      else if (f === 2 && w === 2) value = any.bytes();
      else any.skip(w);
    }
    if (typeUrl !== ERROR_INFO_TYPE || value === undefined) continue;
    const info = { reason: "", domain: "" };
    const ir = new BinaryReader(value);
    while (ir.pos < ir.len) {
      const [f, w] = ir.tag();
      if (f === 1 && w === 2) info.reason = ir.string();
      else if (f === 2 && w === 2) info.domain = ir.string();
      else ir.skip(w);
    }
    out.push(info);
  }
  return out;
}
