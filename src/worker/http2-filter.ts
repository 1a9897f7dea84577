/**
 * The HTTP/2 filter: what request-filter.ts does for node:http servers, for the
 * servers of `http2.createServer()` and `http2.createSecureServer()`.
 *
 * It overrides `server.emit` and decides on the `'stream'` event, before any app
 * code runs: a probe is answered, a stream in the reject phase gets the drain
 * 503, everything else goes on (and is counted in flight until the stream
 * closes). node:http2's compatibility API (`'request'` with
 * Http2ServerRequest/Http2ServerResponse) is built by a `'stream'` listener of
 * Node's own, so apps of either API are covered by the one decision, and a
 * stream answered here never becomes a `'request'`.
 *
 * HTTP/2 has no `Connection: close` (a connection-specific header: RFC 9113
 * section 8.2.2; Node drops it with an UnsupportedWarning). A connection is
 * ended with GOAWAY (RFC 9113 section 6.8), sent per session, in the steps of
 * SessionStage: the shutdown notice at the drain's start, the final GOAWAY a
 * second later (at once, for a session that opens after listening stopped),
 * and a destroy once nothing is in flight. `server.close()` alone sends no
 * GOAWAY and leaves sessions taking new streams.
 *
 * With `allowHTTP1`, HTTP/1.1 requests arrive on the same server as `'request'`
 * events of node:http's own IncomingMessage/ServerResponse: they go to a
 * RequestFilter (Http1Fallback) composed in here, so they get the HTTP/1.1
 * treatment unchanged, and RequestFilter's hot path pays nothing for HTTP/2.
 *
 * Per stream: no closure, no allocation; state in plain fields (the rules of
 * request-filter.ts). Sessions are tracked per connection, on its 'session'
 * event.
 */
import http from 'node:http';
import {performance} from 'node:perf_hooks';
import type {IncomingHttpHeaders, Http2SecureServer, Http2Server, OutgoingHttpHeaders, ServerHttp2Session, ServerHttp2Stream} from 'node:http2';
import {Mode, type DrainReason, type LongLivedClosed, type ServerFilter} from './filter.js';
import {ALIVE_BODY, DRAINING_BODY, isPath, READY_BODY, REJECT_BODY, RequestFilter, type FilterOptions} from './request-filter.js';

/** GOAWAY's error code for a graceful shutdown (RFC 9113 section 7). */
const NO_ERROR = 0;
/** The largest stream id: a GOAWAY carrying it refuses no stream yet, it only announces the end (RFC 9113 section 6.8). */
const MAX_STREAM_ID = 2 ** 31 - 1;

export type Http2AnyServer = Http2Server | Http2SecureServer;

/** What the log says about a rejected HTTP/2 stream. */
export interface RejectedStream {
	readonly method: string | undefined;
	readonly path: string | undefined;
	readonly remote: string | undefined;
}

export interface Http2FilterOptions extends FilterOptions {
	/** Called when an HTTP/2 stream is rejected; for logging. `onReject` is for HTTP/1.1 requests (`allowHTTP1`). */
	readonly onRejectStream?: ((stream: RejectedStream) => void) | undefined;
}

/**
 * The time between a session's shutdown notice and its final GOAWAY: a round
 * trip's allowance, as Go's HTTP/2 server (1 s) and Envoy's `drain_timeout` give.
 * Short on purpose: once a GOAWAY has gone out, nghttp2 stops reading a session
 * with no stream open (`nghttp2_session_want_read()`), so a stream the client
 * sent before the notice reached it waits unread until the final GOAWAY refuses
 * it (REFUSED_STREAM: not processed, safe to retry). Verified on Node 20.20.
 */
export const SHUTDOWN_NOTICE_MS = 1000;

/**
 * What a session has been told, in order; each step at most once, never back.
 * Stored on the session (SESSION_STAGE): absent is `'open'`.
 */
export type SessionStage =
	/** Serving: nothing. */
	| 'open'
	/**
	 * GOAWAY(NO_ERROR, 2^31-1), the shutdown notice (RFC 9113 section 6.8): open
	 * new streams on a new connection. Streams already on their way are taken.
	 * Sent at the drain's start, or on the first stream of a session opened
	 * during the drain (sent at connect, it would stop nghttp2 reading the
	 * client's first stream: see SHUTDOWN_NOTICE_MS). The final GOAWAY follows
	 * SHUTDOWN_NOTICE_MS later.
	 */
	| 'notified'
	/**
	 * `session.close()`: the final GOAWAY with the last stream id taken; streams
	 * in flight finish, then the session closes. A later stream is refused by
	 * nghttp2 (the client knows it was not processed).
	 */
	| 'closing'
	/** Nothing in flight any more: `session.destroy()` (a GOAWAY, then the socket ends). */
	| 'destroyed';

const STAGE_ORDER: readonly SessionStage[] = ['open', 'notified', 'closing', 'destroyed'];
const SESSION_STAGE = Symbol('graceful-cluster.sessionStage');
type TrackedSession = ServerHttp2Session & {[SESSION_STAGE]?: SessionStage};

/**
 * HTTP/1.1 on an HTTP/2 server (`allowHTTP1`): RequestFilter's treatment. Node
 * tracks those connections as http.Server does, but the HTTP/2 server has no
 * `closeAllConnections()` of its own: http.Server's is borrowed (a no-op when
 * nothing is tracked, as on `http2.createServer()`).
 */
class Http1Fallback extends RequestFilter {
	override closeConnections(): void {
		http.Server.prototype.closeAllConnections.call(this.server);
	}
}

type EmitStream = (this: Http2AnyServer, event: 'stream', stream: unknown, headers: unknown, flags: unknown, rawHeaders: unknown) => boolean;
type EmitRequest = (this: Http2AnyServer, event: 'request', request: unknown, response: unknown) => boolean;

function ignore(): void {
	// A client's RST_STREAM on a stream answered here: nothing to do.
}

export class Http2Filter implements ServerFilter {
	private streamsInflight = 0;
	private streamsServed = 0;
	private streamsRejected = 0;
	private mode: Mode = Mode.SERVING;
	/** What every session, a new one too, is told at least: `'closing'` once listening stopped. */
	private floor: SessionStage = 'open';
	private readonly sessions = new Set<TrackedSession>();
	/** Notified sessions waiting for their final GOAWAY, oldest first, with when they were notified. */
	private readonly noticed: Array<{readonly session: TrackedSession; readonly at: number}> = [];
	private noticeTimer: NodeJS.Timeout | undefined;
	private readonly http1: Http1Fallback;
	private readonly ownEmit: Http2AnyServer['emit'];
	private readonly rejectHeaders: OutgoingHttpHeaders;
	private readonly onStreamClose: (this: ServerHttp2Stream) => void;
	private readonly onSession: (session: ServerHttp2Session) => void;
	private readonly onSessionClose: (this: ServerHttp2Session) => void;

	constructor(readonly server: Http2AnyServer, private readonly options: Http2FilterOptions) {
		this.ownEmit = server.emit;
		// First, so that a second attach() of this server throws before anything is installed.
		this.http1 = new Http1Fallback(server as unknown as http.Server, options);
		const http1Emit = server.emit;
		const ownEmit = this.ownEmit;
		// No `connection`: connection-specific headers are malformed in HTTP/2.
		this.rejectHeaders = {
			':status': 503,
			'retry-after': String(options.retryAfterSeconds),
			'content-type': 'text/plain; charset=utf-8',
			'content-length': REJECT_BODY.length,
			'cache-control': 'no-store',
		};
		const filter = this;
		// One listener for all streams, made once per server; called with the stream
		// as `this`. 'close' fires for finished and for reset streams alike.
		this.onStreamClose = function () {
			filter.streamsInflight--;
			if (filter.mode !== Mode.SERVING) {
				filter.streamsServed++;
				if (filter.inflight === 0) {
					filter.options.onIdle();
				}
			}
		};

		this.onSessionClose = function (this: ServerHttp2Session) {
			filter.sessions.delete(this);
		};

		this.onSession = (session: ServerHttp2Session) => {
			this.sessions.add(session);
			session.on('close', this.onSessionClose);
			this.tell(session, this.floor);
		};

		server.on('session', this.onSession);
		// eslint-disable-next-line func-names
		server.emit = function (this: Http2AnyServer, event: string | symbol, a?: unknown, b?: unknown, c?: unknown, d?: unknown): boolean {
			if (event === 'stream') {
				if (filter.intercept(a as ServerHttp2Stream, b as IncomingHttpHeaders)) {
					return true;
				}

				return (ownEmit as EmitStream).call(this, event, a, b, c, d);
			}

			if (event === 'request') {
				// HTTP/2 compatibility requests were decided on as streams; HTTP/1.1
				// ones (allowHTTP1) go through the HTTP/1.1 filter.
				const emit = (a as {httpVersionMajor?: number}).httpVersionMajor === 2 ? ownEmit : http1Emit;
				return (emit as EmitRequest).call(this, event, a, b);
			}

			// eslint-disable-next-line prefer-rest-params
			return Reflect.apply(ownEmit, this, arguments) as boolean;
		} as Http2AnyServer['emit'];
	}

	/** Streams and HTTP/1.1 requests handed to the app that have not closed yet. */
	get inflight(): number {
		return this.streamsInflight + this.http1.inflight;
	}

	get served(): number {
		return this.streamsServed + this.http1.served;
	}

	get rejected(): number {
		return this.streamsRejected + this.http1.rejected;
	}

	// Long-lived connections: HTTP/1.1 upgrades and event streams of an
	// `allowHTTP1` server. An HTTP/2 stream, event stream or not, ends with its
	// session, which the GOAWAYs close.
	get upgrades(): number {
		return this.http1.upgrades;
	}

	get streams(): number {
		return this.http1.streams;
	}

	sortLongLived(): void {
		this.http1.sortLongLived();
	}

	closeLongLived(reason: DrainReason): LongLivedClosed {
		return this.http1.closeLongLived(reason);
	}

	get draining(): boolean {
		return this.mode !== Mode.SERVING;
	}

	/** Sessions open now; for tests and logs. */
	get sessionCount(): number {
		return this.sessions.size;
	}

	setMode(mode: Mode): void {
		const wasServing = this.mode === Mode.SERVING;
		this.mode = mode;
		this.http1.setMode(mode);
		if (wasServing && mode !== Mode.SERVING) {
			this.tellAll('notified');
		}
	}

	/**
	 * Stops listening (RequestFilter's way: with `allowHTTP1`, `server.close()`
	 * also closes idle HTTP/1.1 connections). Unless idle connections are kept
	 * (a reload's linger), every session gets its final GOAWAY.
	 */
	stopAccepting(keepIdle: boolean): void {
		this.http1.stopAccepting(keepIdle);
		if (!keepIdle) {
			this.floor = 'closing';
			this.tellAll('closing');
		}
	}

	/** Nothing is in flight: every session and HTTP/1.1 connection left is closed. */
	closeConnections(): void {
		this.http1.closeConnections();
		this.floor = 'destroyed';
		this.tellAll('destroyed');
		clearTimeout(this.noticeTimer);
	}

	uninstall(): void {
		this.http1.uninstall();
		if (this.server.emit !== this.ownEmit) {
			this.server.emit = this.ownEmit;
		}

		this.server.removeListener('session', this.onSession);
		clearTimeout(this.noticeTimer);
		for (const session of this.sessions) {
			session.removeListener('close', this.onSessionClose);
		}

		this.sessions.clear();
	}

	private tellAll(stage: SessionStage): void {
		for (const session of this.sessions) {
			this.tell(session, stage);
		}
	}

	/** Moves `session` on to `stage` (nothing if it is there or further already). */
	private tell(session: TrackedSession, stage: SessionStage): void {
		if (STAGE_ORDER.indexOf(stage) <= STAGE_ORDER.indexOf(session[SESSION_STAGE] ?? 'open')) {
			return;
		}

		session[SESSION_STAGE] = stage;
		switch (stage) {
			case 'open': {
				break;
			}

			case 'notified': {
				// goaway() throws on a destroyed session.
				if (!session.closed && !session.destroyed) {
					session.goaway(NO_ERROR, MAX_STREAM_ID);
					this.noticed.push({session, at: performance.now()});
					this.noticeTimer ??= setTimeout(this.endNotices, SHUTDOWN_NOTICE_MS).unref();
				}

				break;
			}

			case 'closing': {
				session.close();
				break;
			}

			case 'destroyed': {
				session.destroy();
				break;
			}

			default: {
				const never: never = stage;
				throw new Error(`unknown session stage ${String(never)}`);
			}
		}
	}

	/** The final GOAWAY for every session notified SHUTDOWN_NOTICE_MS ago or more; the timer re-armed for the next. */
	private readonly endNotices = (): void => {
		this.noticeTimer = undefined;
		const now = performance.now();
		while (this.noticed.length > 0 && now - this.noticed[0]!.at >= SHUTDOWN_NOTICE_MS - 1) {
			this.tell(this.noticed.shift()!.session, 'closing');
		}

		if (this.noticed.length > 0) {
			this.noticeTimer = setTimeout(this.endNotices, SHUTDOWN_NOTICE_MS - (now - this.noticed[0]!.at)).unref();
		}
	};

	/** Returns true when the stream was answered here and must not reach the app. */
	private intercept(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean {
		const path = headers[':path'] ?? '';
		if (isPath(path, this.options.readinessPath)) {
			const ready = this.mode === Mode.SERVING || this.mode === Mode.RETIRE;
			this.answer(stream, ready ? 200 : 503, ready ? READY_BODY : DRAINING_BODY);
			return true;
		}

		if (isPath(path, this.options.livenessPath)) {
			this.answer(stream, 200, ALIVE_BODY);
			return true;
		}

		// One comparison while serving; the drain's work sits behind it.
		if (this.mode !== Mode.SERVING) {
			// A session opened during the drain: told on its first stream, while that
			// stream keeps nghttp2 reading.
			const session = stream.session as TrackedSession | undefined;
			if (session !== undefined && session[SESSION_STAGE] === undefined) {
				this.tell(session, 'notified');
			}

			if (this.mode === Mode.REJECT) {
				this.reject(stream, headers);
				return true;
			}
		}

		this.streamsInflight++;
		stream.on('close', this.onStreamClose);
		return false;
	}

	/**
	 * The drain 503: `Retry-After`, and the promise that the app never saw the
	 * stream. A request body still arriving is read and dropped, as the HTTP/1.1
	 * filter does, so the stream ends cleanly on both sides.
	 */
	private reject(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
		this.streamsRejected++;
		this.options.onRejectStream?.({method: headers[':method'], path: headers[':path'], remote: stream.session?.socket?.remoteAddress});
		this.respond(stream, this.rejectHeaders, REJECT_BODY);
		stream.resume();
	}

	private answer(stream: ServerHttp2Stream, status: number, body: Buffer): void {
		this.respond(stream, {
			':status': status,
			'content-type': 'text/plain; charset=utf-8',
			'content-length': body.length,
			'cache-control': 'no-store',
		}, body);
	}

	private respond(stream: ServerHttp2Stream, headers: OutgoingHttpHeaders, body: Buffer): void {
		stream.on('error', ignore);
		// Reset by the client before its turn: respond() would throw.
		if (stream.destroyed || stream.closed) {
			return;
		}

		// respond() copies the headers; for a HEAD request it ends the stream itself
		// (`headRequest`: in Node since v8, not in @types/node).
		stream.respond(headers);
		if (!(stream as {headRequest?: boolean}).headRequest) {
			stream.end(body);
		}
	}
}
