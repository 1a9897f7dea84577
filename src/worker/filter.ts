/**
 * What a drain needs of the filter in front of one attached server, whatever
 * its protocol: `request-filter.ts` for node:http and node:https servers; an
 * HTTP/2 server's filter implements the same. The drain (drain.ts) only talks
 * to this interface, never to the server's own close methods, because each
 * protocol stops differently (HTTP/1.1: `Connection: close`; HTTP/2: GOAWAY).
 */
import type net from 'node:net';

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
	/** Requests handed to the app since attach() (the heartbeat's count, `--max-requests`); absent: not counted. */
	readonly requests?: number;
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
