/**
 * What a drain needs of the filter in front of one attached server, whatever
 * its protocol: `request-filter.ts` for node:http and node:https servers; an
 * HTTP/2 server's filter implements the same. The drain (drain.ts) only talks
 * to this interface, never to the server's own close methods, because each
 * protocol stops differently (HTTP/1.1: `Connection: close`; HTTP/2: GOAWAY).
 */
import http from 'node:http';
import type {Http2SecureServer, Http2Server} from 'node:http2';
import type https from 'node:https';
import net from 'node:net';

/** What a filter does with a new request. Plain numbers: compared on the hot path. */
export const Mode = {
	/** Normal operation: probes answered, everything else to the app. */
	SERVING: 0,
	/** Draining, serve phase: to the app, but the connection ends after it. */
	DRAIN_SERVE: 1,
	/** Draining, reject phase and after: 503 + `Retry-After`, the connection ends after it. */
	REJECT: 2,
	/**
	 * Retiring during a reload: no longer listening, so only requests on open
	 * connections arrive; they are served and the connection ends after them.
	 * Readiness stays 200: the pod is ready, its other workers serve.
	 */
	RETIRE: 3,
} as const;
export type Mode = (typeof Mode)[keyof typeof Mode];

/**
 * Why long-lived connections are being closed, and the WebSocket close code
 * that says so: 1001 "going away" for a shutdown, 1012 "service restart" for a
 * reload (RFC 6455 section 7.4.1, IANA registry).
 */
export type DrainReason = 'shutdown' | 'reload';
export const CLOSE_CODES: Readonly<Record<DrainReason, 1001 | 1012>> = {shutdown: 1001, reload: 1012};

/** Long-lived connections a filter closed at the end of the reject phase (or of a reload's linger). */
export interface LongLivedClosed {
	readonly upgrades: number;
	readonly streams: number;
}

export interface ServerFilter {
	readonly server: net.Server;
	/** Requests handed to the app whose response has not closed yet (event streams sorted out: `streams`). */
	readonly inflight: number;
	/** Upgraded connections (WebSockets, socket.io) still open. Never counted in `inflight`. */
	readonly upgrades: number;
	/**
	 * Event-stream responses (`Content-Type: text/event-stream`) still open, as of
	 * the last `sortLongLived()`. Never counted in `inflight` once sorted.
	 */
	readonly streams: number;
	/** Responses to app requests that closed during the drain. */
	readonly served: number;
	/** Requests answered with the drain 503. */
	readonly rejected: number;
	/**
	 * Requests handed to the app since attach(), HTTP/2 streams included (the
	 * heartbeat's count, `--max-requests`). Probes and rejected requests are not counted.
	 */
	readonly requests: number;
	readonly draining: boolean;
	setMode(mode: Mode): void;
	/**
	 * Stops taking new connections. `keepIdle`: leave idle connections open for
	 * their next request (a reload's linger); otherwise close the idle ones now.
	 */
	stopAccepting(keepIdle: boolean): void;
	/** Closes every connection left; called once nothing is in flight. */
	closeConnections(): void;
	/**
	 * Moves responses in flight that turned out to be long-lived (event streams)
	 * from `inflight` to `streams`. Called at drain time (each phase change and
	 * report), never per request.
	 */
	sortLongLived(): void;
	/**
	 * Closes the upgraded connections and event streams still open, as cleanly
	 * as the protocol allows (a WebSocket close frame with `CLOSE_CODES[reason]`,
	 * an event stream ended), and returns how many of each.
	 */
	closeLongLived(reason: DrainReason): LongLivedClosed;
	/** Takes the filter off; the server serves as if never attached. */
	uninstall(): void;
}

/** Every server `attach()` can drain. */
export type DrainableServer = http.Server | https.Server | Http2Server | Http2SecureServer;

/**
 * Which filter drains `server`: `'http1'` for `node:http` and `node:https`
 * servers (RequestFilter), `'http2'` for `http2.createServer()` and
 * `http2.createSecureServer()` ones, with or without `allowHTTP1`
 * (Http2Filter); undefined for anything else. node:http2 does not export its
 * server classes, and importing it would load it into every app: an HTTP/2
 * server is the `net.Server` (or `tls.Server`) with `updateSettings()`, which
 * only node:http2's two server classes define.
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
