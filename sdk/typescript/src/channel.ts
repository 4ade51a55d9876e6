// The gRPC channel to sessiond, created only after the socket's folder
// passed the trust check, and re-checked before every connection attempt
// grpc-js makes on it (the first connect and every reconnect).

import type { Socket } from "node:net";
import { resolve } from "node:path";
import { CallCredentials, ChannelCredentials, type ChannelOptions, type experimental } from "@grpc/grpc-js";

import { SessiondClient } from "./gen/sessiond/v1/sessiond.js";
import { checkSocketFolder, UntrustedSocketError } from "./socket.js";

// TrustedUnixCredentials is an insecure (plaintext, local) channel
// credential whose connector runs checkSocketFolder before each connection
// attempt. grpc-js calls waitForReady() right before it opens the socket
// (transport.ts: Http2SubchannelConnector.connect), so a folder replaced
// after the channel was created (say, while the daemon restarted) is refused
// before a single byte is written to it. connect() checks once more after
// the socket connected, before gRPC sends its preface.
class TrustedUnixCredentials extends ChannelCredentials {
  constructor(
    private readonly socketPath: string,
    private readonly onRefused: (err: UntrustedSocketError) => void,
  ) {
    super();
  }

  override _isSecure(): boolean {
    return false;
  }

  override _equals(other: ChannelCredentials): boolean {
    return other === this;
  }

  override _createSecureConnector(_target: experimental.GrpcUri, _options: ChannelOptions, callCredentials?: CallCredentials): experimental.SecureConnector {
    const creds = callCredentials ?? CallCredentials.createEmpty();
    const check = (): void => {
      try {
        checkSocketFolder(this.socketPath);
      } catch (err) {
        if (err instanceof UntrustedSocketError) this.onRefused(err);
        throw err;
      }
    };
    return {
      waitForReady: async (): Promise<void> => check(),
      connect: async (socket: Socket): Promise<experimental.SecureConnectResult> => {
        try {
          check();
        } catch (err) {
          socket.destroy();
          throw err;
        }
        return { socket, secure: false };
      },
      getCallCredentials: () => creds,
      destroy: () => {},
    };
  }
}

const CHANNEL_OPTIONS: ChannelOptions = {
  // Entries reach 32 MiB and a batch 64 MiB (the daemon's limits).
  "grpc.max_receive_message_length": -1,
  "grpc.max_send_message_length": -1,
  // The adapter retries itself, with a stable batch id.
  "grpc.enable_retries": 0,
  // One connection per store: never share a subchannel with another
  // channel (whose credentials would not run our check).
  "grpc.use_local_subchannel_pool": 1,
};

/**
 * Connection owns at most one channel to the socket. client() creates it
 * on demand after checkSocketFolder passed (it throws UntrustedSocketError
 * or SocketMissingError otherwise); discard() closes it so that the next
 * client() checks again and dials afresh.
 */
export class Connection {
  readonly socketPath: string;
  private current: SessiondClient | undefined;
  private refusal: UntrustedSocketError | undefined;

  constructor(socketPath: string) {
    this.socketPath = resolve(socketPath);
  }

  client(): SessiondClient {
    if (this.current !== undefined) return this.current;
    this.refusal = undefined;
    checkSocketFolder(this.socketPath);
    const creds = new TrustedUnixCredentials(this.socketPath, (err) => {
      this.refusal = err;
    });
    this.current = new SessiondClient(`unix:${this.socketPath}`, creds, CHANNEL_OPTIONS);
    return this.current;
  }

  /**
   * refused returns the UntrustedSocketError the connector raised on this
   * channel since it was created, if any: a call that failed UNAVAILABLE
   * because of it must report the refusal, not a transient failure.
   */
  refused(): UntrustedSocketError | undefined {
    return this.refusal;
  }

  discard(): void {
    const c = this.current;
    this.current = undefined;
    c?.close();
  }
}
