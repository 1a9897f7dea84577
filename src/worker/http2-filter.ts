/**
 * The HTTP/2 adapter: what http1-filter.ts does, for `http2.createServer()` and
 * `http2.createSecureServer()` servers. It overrides `server.emit` and decides on the
 * `'stream'` event, before any app code runs. node:http2's compatibility API
 * (`'request'`) is built by a `'stream'` listener of Node's own, so one decision
 * covers apps of either API. Connections end with GOAWAY (http2-sessions.ts).
 *
 * With `allowHTTP1`, HTTP/1.1 requests arrive on the same server as `'request'`
 * events: they go to a RequestFilter composed in here, so the HTTP/1.1 hot path
 * pays nothing for HTTP/2. Per stream: no closure, no allocation.
 */
import type http from 'node:http';
import type {IncomingHttpHeaders, Http2SecureServer, Http2Server, Http2ServerRequest, Http2ServerResponse, ServerHttp2Session, ServerHttp2Stream} from 'node:http2';
import {isLive, Mode, type FilterOptions, type ServerFilter} from './filter.js';
import {RequestFilter} from './http1-filter.js';
import {DrainAnswers, headerNames, isGrpc, probeAnswer, respond} from './http2-answers.js';
import {Sessions} from './http2-sessions.js';
import {inBackground, systemClock} from '../clock.js';
import {Arrivals, PEER_COUNTER, type Counted} from './arrivals.js';
import {Ledger} from './ledger.js';
import {endOwnedStream, ignoreError, isEventStreamHeaders, wantsEventStream, type DrainReason, type LongLivedClosed} from './long-lived.js';
import {Probes, type ProbeAnswer} from './probes.js';
import type {ReadinessProbe} from './readiness.js';

export {SHUTDOWN_NOTICE_MS} from './http2-sessions.js';

export type Http2AnyServer = Http2Server | Http2SecureServer;

const isEventStream = (stream: ServerHttp2Stream): boolean => isEventStreamHeaders(stream.sentHeaders);

/** RFC 9113 section 7; node:http2's constants are not loaded here (filter.ts `drainableKind`). */
const NO_ERROR = 0x0;
const CANCEL = 0x8;

/**
 * A stream the client reset after the app ended it closes with the client's code
 * (CANCEL), not NO_ERROR. `writableFinished` cannot tell: Node ends an aborted
 * stream's writable side itself as it closes.
 */
function streamCompleted(stream: ServerHttp2Stream): boolean {
	return !stream.aborted && stream.rstCode === NO_ERROR;
}

/** Not `closed`: HTTP/2 says so as soon as the app calls `close()`, with megabytes perhaps still queued for a slow client. */
const streamDone = (stream: ServerHttp2Stream): boolean => stream.destroyed;

/** Its end is stuck behind data the client does not read (flow control); RST_STREAM, a control frame, goes out at once. */
function cancelStream(stream: ServerHttp2Stream): void {
	if (!stream.closed) {
		stream.close(CANCEL);
	}
}

function endStream(stream: ServerHttp2Stream): void {
	if (!stream.writableEnded && !stream.destroyed) {
		endOwnedStream(stream);
	}
}

type EmitStream = (this: Http2AnyServer, event: 'stream', stream: unknown, headers: unknown, flags: unknown, rawHeaders: unknown) => boolean;
type EmitRequest = (this: Http2AnyServer, event: 'request' | 'checkContinue', request: unknown, response: unknown) => boolean;

export class Http2Filter implements ServerFilter {
	private readonly ledger: Ledger<ServerHttp2Stream>;
	private readonly probes: Probes;
	private readonly arrivals: Arrivals;
	private readonly sessions: Sessions;
	private mode: Mode = Mode.SERVING;
	/**
	 * HTTP/1.1 on this server (`allowHTTP1`). Node keeps no list of those connections on
	 * an HTTP/2 server, so `closeConnections()` finds none of them (on Node 20); the
	 * sessions are closed here.
	 */
	private readonly http1: RequestFilter;
	private readonly ownEmit: Http2AnyServer['emit'];
	private readonly answers: DrainAnswers;
	private readonly names = headerNames();
	private readonly currentMode = (): Mode => this.mode;
	/** HTTP/2 streams answered by `--max-event-loop-delay`. */
	private shedStreams = 0;

	constructor(readonly server: Http2AnyServer, private readonly options: FilterOptions) {
		this.sessions = new Sessions(options.maxConnectionAgeMs);
		this.ownEmit = server.emit;
		// One telemetry for both protocols of the server.
		this.arrivals = options.arrivals ?? new Arrivals(inBackground(systemClock));
		this.http1 = new RequestFilter(server as unknown as http.Server, {...options, arrivals: this.arrivals, keepAliveTimeoutMs: undefined});
		this.ledger = new Ledger(() => {
			if (this.inflight === 0) {
				options.onIdle();
			}
		}, streamCompleted, streamDone);
		this.probes = new Probes(options);
		const http1Emit = server.emit;
		const ownEmit = this.ownEmit;
		this.answers = new DrainAnswers(options.retryAfterSeconds);
		const filter = this;
		server.on('session', this.sessions.add);
		server.emit = function (this: Http2AnyServer, event: string | symbol, a?: unknown, b?: unknown, c?: unknown, d?: unknown): boolean {
			if (event === 'stream') {
				if (filter.intercept(a as ServerHttp2Stream, b as IncomingHttpHeaders)) {
					return true;
				}

				return (ownEmit as EmitStream).call(this, event, a, b, c, d);
			}

			if (event === 'request' || event === 'checkContinue') {
				// HTTP/1.1 requests (allowHTTP1) go through the HTTP/1.1 filter.
				if ((a as {httpVersionMajor?: number}).httpVersionMajor !== 2) {
					return (http1Emit as EmitRequest).call(this, event, a, b);
				}

				if (event === 'checkContinue') {
					return filter.checkContinue(a as Http2ServerRequest, b as Http2ServerResponse);
				}

				return (ownEmit as EmitRequest).call(this, event, a, b);
			}

			// eslint-disable-next-line prefer-rest-params -- every argument emit() was given, however many
			return Reflect.apply(ownEmit, this, arguments) as boolean;
		} as Http2AnyServer['emit'];
	}

	get inflight(): number {
		return this.ledger.inflight + this.http1.inflight;
	}

	get served(): number {
		return this.ledger.served + this.http1.served;
	}

	get aborted(): number {
		return this.ledger.aborted + this.http1.aborted;
	}

	get rejected(): number {
		return this.ledger.rejected + this.http1.rejected;
	}

	get redirected(): number {
		return this.ledger.redirected + this.http1.redirected;
	}

	get requests(): number {
		return this.ledger.requests + this.http1.requests;
	}

	get connectionsAged(): number {
		return this.sessions.aged + this.http1.connectionsAged;
	}

	get shed(): number {
		return this.shedStreams + this.http1.shed;
	}

	/** HTTP/1.1 upgrades only: RFC 8441 WebSockets are streams, and not filtered. */
	get upgrades(): number {
		return this.http1.upgrades;
	}

	get streams(): number {
		return this.ledger.streams + this.http1.streams;
	}

	/** For tests and logs. */
	get sessionCount(): number {
		return this.sessions.size;
	}

	sortLongLived(): void {
		this.ledger.sortEventStreams(isEventStream);
		this.http1.sortLongLived();
	}

	closeLongLived(reason: DrainReason): LongLivedClosed {
		this.ledger.sortEventStreams(isEventStream);
		const h2Streams = this.ledger.endEventStreams(endStream);
		const http1 = this.http1.closeLongLived(reason);
		return {upgrades: http1.upgrades, streams: h2Streams + http1.streams};
	}

	cutLongLived(): LongLivedClosed {
		const http1 = this.http1.cutLongLived();
		return {upgrades: http1.upgrades, streams: this.ledger.cutEventStreams(cancelStream) + http1.streams};
	}

	setReadiness(readiness: ReadinessProbe): void {
		this.probes.readiness = readiness;
		this.http1.setReadiness(readiness);
	}

	setMode(mode: Mode): void {
		// Shedding keeps the sessions open: only a drain or a retire sends GOAWAY.
		const wasServing = isLive(this.mode);
		this.mode = mode;
		this.ledger.draining = !isLive(mode);
		this.http1.setMode(mode);
		if (wasServing && !isLive(mode)) {
			this.sessions.raiseFloor('notified');
		}
	}

	stopAccepting(keepIdle: boolean): void {
		this.http1.stopAccepting(keepIdle);
		if (!keepIdle) {
			this.sessions.raiseFloor('closing');
		}
	}

	closeConnections(): void {
		this.http1.closeConnections();
		this.sessions.raiseFloor('destroyed');
	}

	get closingConnections(): number {
		return this.http1.closingConnections;
	}

	uninstall(): void {
		this.http1.uninstall();
		if (this.server.emit !== this.ownEmit) {
			this.server.emit = this.ownEmit;
		}

		this.server.removeListener('session', this.sessions.add);
		this.sessions.clear();
	}

	/** Unless the app listens for `'checkContinue'` (ours is RequestFilter's no-op), Node's default: the 100, then `'request'`. */
	private checkContinue(request: Http2ServerRequest, response: Http2ServerResponse): boolean {
		if (this.server.listenerCount('checkContinue') > 1) {
			return (this.ownEmit as EmitRequest).call(this.server, 'checkContinue', request, response);
		}

		response.writeContinue();
		return (this.ownEmit as EmitRequest).call(this.server, 'request', request, response);
	}

	private intercept(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean {
		const probe = this.probes.match(headers[this.names.path] ?? '');
		if (probe !== undefined) {
			const answer = this.probes.answer(probe, this.currentMode);
			if (answer instanceof Promise) {
				// A client's RST_STREAM while the readiness checks run.
				stream.on('error', ignoreError);
				void answer.then(later => {
					this.answer(stream, later);
				});
			} else {
				this.answer(stream, answer);
			}

			return true;
		}

		// One comparison while serving; the drain's work sits behind it. Counting peers costs
		// about 0.8 % of an h2c stream's instructions (bench/instructions.js).
		if (this.mode === Mode.SERVING) {
			if (this.arrivals.perPeer) {
				const session = stream.session as (ServerHttp2Session & Counted) | undefined;
				if (session) {
					(session[PEER_COUNTER] ?? this.arrivals.counterFor(session, session.socket, headers['user-agent'])).n++;
				}
			}
		} else {
			if (this.mode === Mode.SHED) {
				this.shedStream(stream, headers);
				return true;
			}

			this.arrivals.arrived(stream.session?.socket?.remoteAddress, headers['user-agent']);
			this.sessions.streamDuringDrain(stream.session as ServerHttp2Session | undefined);
			if (this.mode === Mode.REJECT) {
				this.reject(stream, headers);
				return true;
			}

			if (this.mode === Mode.RETIRE && this.redirect(stream, headers)) {
				return true;
			}
		}

		this.ledger.add(stream);
		return false;
	}

	/** A request body still arriving is read and dropped, as the HTTP/1.1 filter does, so the stream ends cleanly on both sides. */
	private reject(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
		this.ledger.rejected++;
		this.options.onReject?.({method: headers[this.names.method], path: headers[this.names.path], remote: stream.session?.socket?.remoteAddress});
		// A gRPC call is refused as gRPC says; EventSource never retries a 503.
		respond(stream, isGrpc(headers['content-type']) ? this.answers.grpcReject : (wantsEventStream(headers) ? this.answers.eventStream : this.answers.reject));
		stream.resume();
	}

	/** `--max-event-loop-delay`: 503 + `retry-after` on the stream; the session stays open (HTTP/2 has no `Connection: close`). */
	private shedStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
		this.shedStreams++;
		respond(stream, isGrpc(headers['content-type']) ? this.answers.grpcShed : (wantsEventStream(headers) ? this.answers.eventStream : this.answers.shed));
		stream.resume();
	}

	/**
	 * Retiring: a stream that would last until the linger's end is told to go elsewhere
	 * now: a new event stream gets a 200 with a short `retry:`; a WebSocket (RFC 8441
	 * extended CONNECT) gets `503` + `retry-after: 0`. The session has its GOAWAY
	 * already, so the client's next stream goes to a new connection. Only a session's
	 * first stream since the retire gets here: nghttp2 takes no new stream once any
	 * GOAWAY has gone out.
	 */
	private redirect(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean {
		if (wantsEventStream(headers)) {
			respond(stream, this.answers.retireStream);
		} else if (headers[this.names.method] === 'CONNECT' && headers[this.names.protocol] === 'websocket') {
			respond(stream, this.answers.retireConnect);
		} else {
			return false;
		}

		this.ledger.redirected++;
		stream.resume();
		return true;
	}

	private answer(stream: ServerHttp2Stream, {status, body}: ProbeAnswer): void {
		respond(stream, probeAnswer(status, body));
	}
}
