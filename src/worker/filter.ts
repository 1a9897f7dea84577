/**
 * The filter in front of one drained server, as the drain (drain.ts) sees it
 * whatever the protocol (http1-filter.ts, http2-filter.ts: each stops its own
 * way, `Connection: close` or GOAWAY), the modes it answers in, and which
 * servers can be drained at all.
 */
import * as http from 'node:http';
import type {Http2SecureServer, Http2Server} from 'node:http2';
import type * as https from 'node:https';
import * as net from 'node:net';
import path from 'node:path';
import type {Counts} from '../counts.js';
import type {DrainReason, LongLivedClosed} from './long-lived.js';
import type {NoticeCode} from '../protocol.js';
import type {Arrivals} from './arrivals.js';
import type {ReadinessProbe} from './readiness.js';

/** What a filter does with a new request. Plain numbers: compared on the hot path. */
export const Mode = {
	/** Normal operation: probes answered, everything else to the app. */
	SERVING: 0,
	/** Draining, serve phase: to the app, but the connection ends after it. */
	DRAIN_SERVE: 1,
	/** Draining, reject phase and after: 503 + `Retry-After`, the connection ends after it. */
	REJECT: 2,
	/**
	 * Retiring in a reload: requests on open connections are served, the
	 * connection ending after them; what would outlive the linger (a new event
	 * stream, a WebSocket) is sent to the other workers at once. Readiness stays 200.
	 */
	RETIRE: 3,
} as const;
export type Mode = (typeof Mode)[keyof typeof Mode];

/** What the log says about a rejected request (debug level only). */
export interface RejectedRequest {
	readonly method: string | undefined;
	readonly path: string | undefined;
	readonly remote: string | undefined;
}

export interface FilterOptions {
	readonly retryAfterSeconds: number;
	/** Answered 200 while serving (once the readiness checks pass), 503 from the first moment of a drain. `''`: off. */
	readonly readinessPath: string;
	/** Answered 200 until the process exits. `''`: off. */
	readonly livenessPath: string;
	/** The process's arrival telemetry (arrivals.ts); the filter makes its own when absent (unit tests). */
	readonly arrivals?: Arrivals | undefined;
	/** Something for the primary to tell the operator once (protocol.ts `NoticeMessage`). */
	readonly onNotice?: ((code: NoticeCode) => void) | undefined;
	/**
	 * `--keep-alive-timeout`, set on an HTTP/1.1 server as the filter goes on
	 * (`headersTimeout` kept above it) and given back when it comes off; 0 or
	 * absent leaves the server's own.
	 */
	readonly keepAliveTimeoutMs?: number | undefined;
	/** Called when a request is rejected; for logging. Unset, a rejection costs no call. */
	readonly onReject?: ((request: RejectedRequest) => void) | undefined;
	/**
	 * Called during a drain when the last in-flight request of this server
	 * finishes, or a long-lived connection it closed has finished closing: the
	 * drain looks again whether it can move on.
	 */
	readonly onIdle: () => void;
	/** The server began to listen after the drain had stopped accepting (it is closed at once): for the log. */
	readonly onLateListen?: ((address: ReturnType<net.Server['address']>) => void) | undefined;
	/**
	 * The longest a connection the drain closes may linger now
	 * (LINGER_MAX_MS, or less near the deadline); LINGER_MAX_MS when absent
	 * (unit tests).
	 */
	readonly lingerMs?: (() => number) | undefined;
}

/**
 * How long a connection closed at the drain's end may stay quiet before it is
 * destroyed: Apache's lingering close reads for 2 s (nginx's
 * `lingering_timeout` is 5). A client that reads what it was sent closes its
 * side within a round trip after our FIN; this bounds one that does not.
 */
export const LINGER_MS = 2000;

/**
 * How long the drain waits, once it stopped listening, for the first request
 * of a connection accepted just before (http1-connections.ts
 * `awaitFirstRequest`). It is on its way: a round trip, and the time node:cluster
 * takes to hand the connection over.
 */
export const FIRST_REQUEST_WAIT_MS = 1000;

/**
 * The longest a connection closed at the drain's end may linger while its
 * client keeps sending (an upload the app never read), as nginx's
 * `lingering_time`: destroyed while bytes still arrive, the close is a reset
 * that throws away what the client had not read yet. Half the time left to
 * the deadline, when that is less.
 */
export const LINGER_MAX_MS = 30_000;

export interface ServerFilter extends Counts {
	readonly server: net.Server;
	/**
	 * Requests handed to the app since attach(), HTTP/2 streams included (the
	 * heartbeat's count, `--max-requests`). Probes and rejected requests are not counted.
	 */
	readonly requests: number;
	/** The app's readiness checks, run by the readiness probe while serving (`attach(server, {readinessChecks})`). */
	setReadiness(readiness: ReadinessProbe): void;
	setMode(mode: Mode): void;
	/**
	 * Stops taking new connections. `keepIdle`: leave idle connections open for
	 * their next request (a reload's linger); otherwise close the idle ones now.
	 */
	stopAccepting(keepIdle: boolean): void;
	/**
	 * Closes every connection left, called once nothing is in flight:
	 * gracefully, so that what a connection still has to send reaches its
	 * client (http1-connections.ts `closeLingering`), within `lingerMs`.
	 * `onIdle` is called when the last of them has closed.
	 */
	closeConnections(): void;
	/**
	 * Connections closing gracefully that have not closed yet: those
	 * `closeConnections()` closes, and those the drain ended with
	 * `Connection: close` after their last response.
	 */
	readonly closingConnections: number;
	/**
	 * Moves responses in flight that turned out to be long-lived (event streams)
	 * from `inflight` to `streams`. Called at drain time (each phase change and
	 * report), never per request.
	 */
	sortLongLived(): void;
	/**
	 * Closes the upgraded connections and event streams still open, as cleanly
	 * as the protocol allows (long-lived.ts), and returns how many of each.
	 */
	closeLongLived(reason: DrainReason): LongLivedClosed;
	/**
	 * Destroys the upgraded connections and event streams still open (their
	 * close did not finish in time), takes them off `upgrades` and `streams` at
	 * once, and returns how many of each.
	 */
	cutLongLived(): LongLivedClosed;
	/** Takes the filter off; the server serves as if never attached. */
	uninstall(): void;
}

/** Every server `attach()` can drain. */
export type DrainableServer = http.Server | https.Server | Http2Server | Http2SecureServer;

/**
 * Which filter drains `server`: `'http1'` for `node:http` and `node:https`
 * servers, `'http2'` for `http2.createServer()` and
 * `http2.createSecureServer()` ones, with or without `allowHTTP1`; undefined
 * for anything else. node:http2 does not export its server classes, and
 * importing it would load it into every app: an HTTP/2 server is the
 * `net.Server` (or `tls.Server`) with `updateSettings()`, which only
 * node:http2's two server classes define.
 */
export function drainableKind(server: unknown): 'http1' | 'http2' | undefined {
	if (server instanceof http.Server) {
		return 'http1';
	}

	// node:https only now (an app with an https server has loaded it already):
	// importing it up front would cost every worker's start 6 ms or more.
	if (server instanceof net.Server && server instanceof process.getBuiltinModule('node:https').Server) {
		return 'http1';
	}

	if (server instanceof net.Server && typeof (server as Partial<Http2Server>).updateSettings === 'function') {
		return 'http2';
	}

	return undefined;
}

/** Set on a server the app left out (`exclude()`): a global key, so that two installed copies agree. */
const EXCLUDED = Symbol.for('graceful-cluster.exclude');

export const isExcluded = (server: object): boolean => (server as Record<symbol, unknown>)[EXCLUDED] === true;

export function markExcluded(server: object, excluded: boolean): void {
	(server as Record<symbol, unknown>)[EXCLUDED] = excluded;
}

/** A server's address as node:cluster reports it to the primary: the port, or a socket's resolved path. */
export const addressOf = (address: string | net.AddressInfo): string => (typeof address === 'string' ? path.resolve(address) : String(address.port));
