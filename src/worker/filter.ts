/**
 * What a drain needs of the filter in front of one attached server, whatever
 * its protocol: `request-filter.ts` for node:http and node:https servers; an
 * HTTP/2 server's filter implements the same. The drain (drain.ts) only talks
 * to this interface, never to the server's own close methods, because each
 * protocol stops differently (HTTP/1.1: `Connection: close`; HTTP/2: GOAWAY).
 */
import http from 'node:http';
import type {Http2SecureServer, Http2Server} from 'node:http2';
import https from 'node:https';
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

export interface ServerFilter {
	readonly server: net.Server;
	/** Requests handed to the app whose response has not closed yet. */
	readonly inflight: number;
	/** Responses to app requests that closed during the drain. */
	readonly served: number;
	/** Requests answered with the drain 503. */
	readonly rejected: number;
	readonly draining: boolean;
	setMode(mode: Mode): void;
	/**
	 * Stops taking new connections. `keepIdle`: leave idle connections open for
	 * their next request (a reload's linger); otherwise close the idle ones now.
	 */
	stopAccepting(keepIdle: boolean): void;
	/** Closes every connection left; called once nothing is in flight. */
	closeConnections(): void;
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
	if (server instanceof http.Server || server instanceof https.Server) {
		return 'http1';
	}

	if (server instanceof net.Server && typeof (server as Partial<Http2Server>).updateSettings === 'function') {
		return 'http2';
	}

	return undefined;
}
