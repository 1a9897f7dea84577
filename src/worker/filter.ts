/**
 * The filter in front of one drained server as the drain sees it, whatever the
 * protocol (http1-filter.ts, http2-filter.ts), and which servers can be drained.
 */
import * as http from 'node:http';
import type {Http2SecureServer, Http2Server} from 'node:http2';
import type * as https from 'node:https';
import * as net from 'node:net';
import path from 'node:path';
import type {FilterCounts} from '../counts.js';
import type {DrainReason, LongLivedClosed} from './long-lived.js';
import type {NoticeCode} from '../protocol.js';
import type {Arrivals} from './arrivals.js';
import type {ReadinessProbe} from './readiness.js';

/** What a filter does with a new request. Plain numbers: compared on the hot path. */
export const Mode = {
	SERVING: 0,
	DRAIN_SERVE: 1,
	/** 503 + `Retry-After`; the connection ends after it. */
	REJECT: 2,
	/** A reload's retiring worker: open connections served, each ending after its request; what would outlive the linger (a new event stream, a WebSocket) goes to the other workers. */
	RETIRE: 3,
	/** `--max-event-loop-delay`: the event loop lags, new requests get 503 + `Retry-After` on their kept connection; those in flight go on. Serving otherwise: no drain's bookkeeping. */
	SHED: 4,
} as const;
export type Mode = (typeof Mode)[keyof typeof Mode];

export interface RejectedRequest {
	readonly method: string | undefined;
	readonly path: string | undefined;
	readonly remote: string | undefined;
}

export interface FilterOptions {
	readonly retryAfterSeconds: number;
	/** 200 while serving once the readiness checks pass, 503 from the drain's first moment. `''`: off. */
	readonly readinessPath: string;
	readonly livenessPath: string;
	/** The process's arrival telemetry; the filter makes its own when absent (unit tests). */
	readonly arrivals?: Arrivals | undefined;
	readonly onNotice?: ((code: NoticeCode) => void) | undefined;
	/** `--keep-alive-timeout`, set while the filter is on (`headersTimeout` kept above it); 0 or absent leaves the server's own. */
	readonly keepAliveTimeoutMs?: number | undefined;
	/** Unset, a rejection costs no call. */
	readonly onReject?: ((request: RejectedRequest) => void) | undefined;
	/** During a drain, when this server's last request finishes or a closed long-lived connection has closed: the drain looks again whether it can move on. */
	readonly onIdle: () => void;
	readonly onLateListen?: ((address: ReturnType<net.Server['address']>) => void) | undefined;
	/** The longest a connection the drain closes may linger now (less near the deadline); LINGER_MAX_MS when absent. */
	readonly lingerMs?: (() => number) | undefined;
	/** `--max-connection-age`; 0 or absent: off. */
	readonly maxConnectionAgeMs?: number | undefined;
	/** While this worker sheds: true when the primary said every worker sheds, so readiness answers 503. */
	readonly everyWorkerSheds?: (() => boolean) | undefined;
}

/**
 * How long a connection closed at the drain's end may stay quiet before it is
 * destroyed: Apache's lingering close reads for 2 s (nginx's `lingering_timeout` is 5).
 */
export const LINGER_MS = 2000;

/** The first request of a connection accepted just before the drain stopped listening is on its way: a round trip, plus node:cluster's hand-over. */
export const FIRST_REQUEST_WAIT_MS = 1000;

/**
 * The longest a closed connection may linger while its client keeps sending, as
 * nginx's `lingering_time`: destroyed while bytes arrive, the close is a reset that
 * discards what the client had not read. Half the time to the deadline if less.
 */
export const LINGER_MAX_MS = 30_000;

export interface ServerFilter extends FilterCounts {
	readonly server: net.Server;
	/** Requests handed to the app since attach(), HTTP/2 streams included; not probes nor rejected ones. */
	readonly requests: number;
	/** Connections closed for their age (`--max-connection-age`), HTTP/2 sessions included. */
	readonly connectionsAged: number;
	/** Requests answered 503 by `--max-event-loop-delay` since attach(), counted as answered: not in `rejected`, nor in `requests`. */
	readonly shed: number;
	setReadiness(readiness: ReadinessProbe): void;
	setMode(mode: Mode): void;
	/** `keepIdle`: leave idle connections open for their next request (a reload's linger); otherwise close them now. */
	stopAccepting(keepIdle: boolean): void;
	/** Called once nothing is in flight: closes what is left gracefully (`closeLingering`), so what a connection still has to send reaches its client. */
	closeConnections(): void;
	readonly closingConnections: number;
	/** Moves responses that turned out to be event streams from `inflight` to `streams`; at drain time only, never per request. */
	sortLongLived(): void;
	closeLongLived(reason: DrainReason): LongLivedClosed;
	/** Their close did not finish in time: destroyed, and taken off `upgrades` and `streams` at once. */
	cutLongLived(): LongLivedClosed;
	uninstall(): void;
}

/** Taking new requests, shedding or not: no drain or retire has begun. */
export const isLive = (mode: Mode): boolean => mode === Mode.SERVING || mode === Mode.SHED;

export type DrainableServer = http.Server | https.Server | Http2Server | Http2SecureServer;

/**
 * node:http2 does not export its server classes, and importing it would load it
 * into every app: an HTTP/2 server is the `net.Server` (or `tls.Server`) with
 * `updateSettings()`, which only node:http2's two server classes define.
 */
export function drainableKind(server: unknown): 'http1' | 'http2' | undefined {
	if (server instanceof http.Server) {
		return 'http1';
	}

	// node:https only now (an app with an https server has loaded it): importing it up
	// front would cost every worker's start 6 ms or more.
	if (server instanceof net.Server && server instanceof process.getBuiltinModule('node:https').Server) {
		return 'http1';
	}

	if (server instanceof net.Server && typeof (server as Partial<Http2Server>).updateSettings === 'function') {
		return 'http2';
	}

	return undefined;
}

/** A global key, so that two installed copies agree. */
const EXCLUDED = Symbol.for('graceful-cluster.exclude');

export const isExcluded = (server: object): boolean => (server as Record<symbol, unknown>)[EXCLUDED] === true;

export function markExcluded(server: object, excluded: boolean): void {
	(server as Record<symbol, unknown>)[EXCLUDED] = excluded;
}

export const addressOf = (address: string | net.AddressInfo): string => (typeof address === 'string' ? path.resolve(address) : String(address.port));
