/**
 * The HTTP/2 filter: what request-filter.ts does for node:http servers, for the
 * servers of `http2.createServer()` and `http2.createSecureServer()`.
 *
 * It overrides `server.emit` and decides on the `'stream'` event, before any app
 * code runs: a probe is answered (the readiness checks run first while
 * serving, as for HTTP/1.1), a stream in the reject phase gets the drain 503
 * (a new event stream: a 200 with `retry:` that ends at once), everything else
 * goes on (and is counted in flight until the stream closes). node:http2's compatibility API (`'request'` with
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
 * `'checkContinue'` (`Expect: 100-continue`; emitted because RequestFilter
 * listens for it) is routed by protocol: HTTP/2 ones get Node's default (a 100,
 * then `'request'`) unless the app listens for it too.
 *
 * Event streams (a `text/event-stream` response) are sorted out of the streams
 * in flight at drain time, by the headers the stream sent, and ended when the
 * reject phase ends: an event stream stays open as long as the client likes,
 * and `session.close()` waits for every open stream.
 *
 * Per stream: no closure, no allocation; state in plain fields and a dense
 * array of the open streams (the rules of request-filter.ts). Sessions are
 * tracked per connection, on its 'session' event.
 */
import http from 'node:http';
import {performance} from 'node:perf_hooks';
import type {IncomingHttpHeaders, Http2SecureServer, Http2Server, Http2ServerRequest, Http2ServerResponse, OutgoingHttpHeaders, ServerHttp2Session, ServerHttp2Stream} from 'node:http2';
import {Mode, type DrainReason, type LongLivedClosed, type ServerFilter} from './filter.js';
import type {Readiness} from './readiness.js';
import {
	ALIVE_BODY, DRAINING_BODY, EVENT_STREAM, eventStreamRetryBody, isPath, READY_BODY, REJECT_BODY, RequestFilter, wantsEventStream, type FilterOptions,
} from './request-filter.js';

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
/** Where a stream in flight sits in its filter's `h2Open` array. */
const SLOT = Symbol('graceful-cluster.h2Slot');
type TrackedStream = ServerHttp2Stream & {[SLOT]?: number};

/** The headers of an answer made here; no `connection`: connection-specific headers are malformed in HTTP/2. */
function answerHeaders(status: number, body: Buffer, contentType = 'text/plain; charset=utf-8'): OutgoingHttpHeaders {
	return {':status': status, 'content-type': contentType, 'content-length': body.length, 'cache-control': 'no-store'};
}

/** True when the headers a stream sent make it an event stream. At drain time only: names may be in any case on the `'stream'` API. */
function isEventStream(sent: OutgoingHttpHeaders | undefined): boolean {
	for (const name in sent) {
		if (name.toLowerCase() === 'content-type') {
			const type = sent[name];
			return typeof type === 'string' && EVENT_STREAM.test(type);
		}
	}

	return false;
}

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
type EmitRequest = (this: Http2AnyServer, event: 'request' | 'checkContinue', request: unknown, response: unknown) => boolean;

function ignore(): void {
	// A client's RST_STREAM on a stream answered here: nothing to do.
}

export class Http2Filter implements ServerFilter {
	/** HTTP/2 streams handed to the app that have not closed yet, event streams sorted out; each holds its index under SLOT. */
	private readonly h2Open: ServerHttp2Stream[] = [];
	/** HTTP/2 streams sorted out of `h2Open` as event streams, still open. */
	private readonly h2EventStreams = new Set<ServerHttp2Stream>();
	/** HTTP/2 streams handed to the app that closed during the drain. */
	private h2Served = 0;
	/** HTTP/2 streams answered with the drain 503 (or, asking for an event stream, a `retry:` and an end). */
	private h2Rejected = 0;
	/** HTTP/2 streams handed to the app since attach(). */
	private h2Requests = 0;
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
	private readonly eventStreamBody: Buffer;
	private readonly eventStreamHeaders: OutgoingHttpHeaders;
	private readonly onStreamClose: (this: ServerHttp2Stream) => void;
	private readonly onSession: (session: ServerHttp2Session) => void;
	private readonly onSessionClose: (this: ServerHttp2Session) => void;

	constructor(readonly server: Http2AnyServer, private readonly options: Http2FilterOptions) {
		this.ownEmit = server.emit;
		// First, so that a second attach() of this server throws before anything is installed.
		this.http1 = new Http1Fallback(server as unknown as http.Server, options);
		const http1Emit = server.emit;
		const ownEmit = this.ownEmit;
		this.rejectHeaders = {...answerHeaders(503, REJECT_BODY), 'retry-after': String(options.retryAfterSeconds)};
		this.eventStreamBody = eventStreamRetryBody(options.retryAfterSeconds);
		this.eventStreamHeaders = answerHeaders(200, this.eventStreamBody, 'text/event-stream');
		const filter = this;
		// One listener for all streams, made once per server; called with the stream
		// as `this`. 'close' fires for finished and for reset streams alike.
		this.onStreamClose = function (this: ServerHttp2Stream) {
			// Sorted out as an event stream: never counted as served.
			if (!filter.forget(this)) {
				return;
			}

			if (filter.mode !== Mode.SERVING) {
				filter.h2Served++;
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

			if (event === 'request' || event === 'checkContinue') {
				// HTTP/2 compatibility requests were decided on as streams; HTTP/1.1
				// ones (allowHTTP1) go through the HTTP/1.1 filter.
				if ((a as {httpVersionMajor?: number}).httpVersionMajor !== 2) {
					return (http1Emit as EmitRequest).call(this, event, a, b);
				}

				if (event === 'checkContinue') {
					return filter.checkContinue(a as Http2ServerRequest, b as Http2ServerResponse);
				}

				return (ownEmit as EmitRequest).call(this, event, a, b);
			}

			// eslint-disable-next-line prefer-rest-params
			return Reflect.apply(ownEmit, this, arguments) as boolean;
		} as Http2AnyServer['emit'];
	}

	/** Streams and HTTP/1.1 requests handed to the app that have not closed yet (event streams sorted out). */
	get inflight(): number {
		return this.h2Open.length + this.http1.inflight;
	}

	get served(): number {
		return this.h2Served + this.http1.served;
	}

	get rejected(): number {
		return this.h2Rejected + this.http1.rejected;
	}

	get requests(): number {
		return this.h2Requests + this.http1.requests;
	}

	/** HTTP/1.1 upgrades (`allowHTTP1`); HTTP/2 has none (RFC 8441 WebSockets are streams, and not filtered). */
	get upgrades(): number {
		return this.http1.upgrades;
	}

	/** Event streams still open, HTTP/2 and HTTP/1.1, among those sorted out by `sortLongLived()`. */
	get streams(): number {
		return this.h2EventStreams.size + this.http1.streams;
	}

	sortLongLived(): void {
		this.sortH2EventStreams();
		this.http1.sortLongLived();
	}

	/**
	 * Ends the event streams still open: an HTTP/2 stream with END_STREAM (a
	 * clean end: EventSource reconnects after its `retry`, to another pod), so
	 * its session can close; the HTTP/1.1 ones and upgrades as RequestFilter does.
	 */
	closeLongLived(reason: DrainReason): LongLivedClosed {
		this.sortH2EventStreams();
		const h2Streams = this.h2EventStreams.size;
		for (const stream of this.h2EventStreams) {
			if (!stream.writableEnded && !stream.destroyed) {
				stream.end();
			}
		}

		const http1 = this.http1.closeLongLived(reason);
		return {upgrades: http1.upgrades, streams: h2Streams + http1.streams};
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

	/**
	 * The HTTP/2 streams in flight whose response is an event stream, moved from
	 * `h2Open` to `h2EventStreams`: one pass, at drain time only. A stream that
	 * has not sent its headers yet stays in flight until a later pass.
	 */
	private sortH2EventStreams(): void {
		// Backwards: `forget` moves the last stream into the freed slot, and that
		// one has been looked at already.
		for (let index = this.h2Open.length - 1; index >= 0; index--) {
			const stream = this.h2Open[index]!;
			if (isEventStream(stream.sentHeaders) && this.forget(stream)) {
				this.h2EventStreams.add(stream);
				stream.once('close', () => {
					this.h2EventStreams.delete(stream);
				});
			}
		}
	}

	/**
	 * Takes a stream out of `h2Open` (the last one moves into its place). False
	 * when it was already out: its close was counted once.
	 */
	private forget(stream: ServerHttp2Stream): boolean {
		const tracked = stream as TrackedStream;
		const index = tracked[SLOT];
		if (index === undefined) {
			return false;
		}

		tracked[SLOT] = undefined;
		const last = this.h2Open.pop()!;
		if (last !== stream) {
			this.h2Open[index] = last;
			(last as TrackedStream)[SLOT] = index;
		}

		return true;
	}

	/**
	 * `Expect: 100-continue` on an HTTP/2 stream handed to the app (a rejected
	 * one got its 503 as a stream, without a 100). The app's own
	 * `'checkContinue'` listener decides if there is one (ours is
	 * RequestFilter's no-op); otherwise Node's default: the 100, then `'request'`.
	 */
	private checkContinue(request: Http2ServerRequest, response: Http2ServerResponse): boolean {
		if (this.server.listenerCount('checkContinue') > 1) {
			return (this.ownEmit as EmitRequest).call(this.server, 'checkContinue', request, response);
		}

		response.writeContinue();
		return (this.ownEmit as EmitRequest).call(this.server, 'request', request, response);
	}

	/** Returns true when the stream was answered here and must not reach the app. */
	private intercept(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean {
		const path = headers[':path'] ?? '';
		if (isPath(path, this.options.readinessPath)) {
			const {readiness} = this.options;
			if (readiness !== undefined && this.mode === Mode.SERVING) {
				this.checkReadiness(stream, readiness);
			} else {
				this.answerReadiness(stream);
			}

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

		this.h2Requests++;
		(stream as TrackedStream)[SLOT] = this.h2Open.length;
		this.h2Open.push(stream);
		stream.on('close', this.onStreamClose);
		return false;
	}

	/**
	 * The drain 503: `Retry-After`, and the promise that the app never saw the
	 * stream. A request body still arriving is read and dropped, as the HTTP/1.1
	 * filter does, so the stream ends cleanly on both sides.
	 */
	private reject(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
		this.h2Rejected++;
		this.options.onRejectStream?.({method: headers[':method'], path: headers[':path'], remote: stream.session?.socket?.remoteAddress});
		if (wantsEventStream(headers)) {
			// EventSource never retries a 503: a 200 stream that ends at once after `retry:`.
			this.respond(stream, this.eventStreamHeaders, this.eventStreamBody);
		} else {
			this.respond(stream, this.rejectHeaders, REJECT_BODY);
		}

		stream.resume();
	}

	/** The readiness probe's answer for the mode: 200 while serving or retiring, 503 while draining. */
	private answerReadiness(stream: ServerHttp2Stream): void {
		const ready = this.mode === Mode.SERVING || this.mode === Mode.RETIRE;
		this.answer(stream, ready ? 200 : 503, ready ? READY_BODY : DRAINING_BODY);
	}

	/**
	 * The readiness probe while serving, with checks: 200 once they pass, 503
	 * naming the failing ones; if the drain began meanwhile, the drain's answer.
	 */
	private checkReadiness(stream: ServerHttp2Stream, readiness: Readiness): void {
		// A client's RST_STREAM while the checks run.
		stream.on('error', ignore);
		void readiness.probe().then(failures => {
			if (failures === undefined || this.mode !== Mode.SERVING) {
				this.answerReadiness(stream);
			} else {
				this.answer(stream, 503, failures);
			}
		});
	}

	private answer(stream: ServerHttp2Stream, status: number, body: Buffer): void {
		this.respond(stream, answerHeaders(status, body), body);
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
