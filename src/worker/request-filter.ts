/**
 * The request filter: sits in front of one `http.Server`'s `'request'` event and
 * decides, before any app code runs, whether a request is a probe, is rejected
 * with a drain 503, or goes to the app (and is counted as in flight).
 *
 * It overrides `server.emit` instead of wrapping the `'request'` listeners that
 * exist at install time (terminus' approach), so listeners the app adds later are
 * covered too. The same override sees the requests that never become
 * `'request'` events: `'upgrade'` (WebSockets: rejected with the drain 503 in
 * the reject phase, tracked as upgraded connections otherwise) and
 * `'checkContinue'` (a no-op listener installed here makes Node emit it, so a
 * rejected `Expect: 100-continue` gets its 503 without a `100 Continue` first).
 *
 * This runs for every request of every service that uses us: no closures or
 * timers per request, state in plain fields, logging only when enabled. Long-
 * lived connections cost nothing per request either: upgrades are rare events
 * and are tracked there; event streams are found among the responses in flight
 * at drain time (`sortLongLived`), by their `Content-Type`.
 */
import type {IncomingHttpHeaders, IncomingMessage, Server, ServerResponse} from 'node:http';
import net from 'node:net';
import {CLOSE_CODES, Mode, type DrainReason, type LongLivedClosed, type ServerFilter} from './filter.js';
import type {Readiness} from './readiness.js';
import type {Socket} from 'node:net';

export {Mode} from './filter.js';

export interface FilterOptions {
	readonly retryAfterSeconds: number;
	readonly readinessPath: string;
	readonly livenessPath: string;
	/**
	 * The app's readiness checks (`attach(server, {readinessChecks})`), run when
	 * the readiness path is asked while serving; absent: answered at once.
	 */
	readonly readiness?: Readiness | undefined;
	/** Called when a request is rejected; for logging. Not called per request unless set. */
	readonly onReject?: ((request: IncomingMessage) => void) | undefined;
	/** Called when the last in-flight request of this server finishes during a drain. */
	readonly onIdle: () => void;
}

export const REJECT_BODY = Buffer.from('Service Unavailable: the server is shutting down, retry the request.\n');
export const READY_BODY = Buffer.from('ready\n');
export const DRAINING_BODY = Buffer.from('draining\n');
export const ALIVE_BODY = Buffer.from('alive\n');
const QUESTION_MARK = 63;
/**
 * How long an upgraded connection gets, after its WebSocket close frame, for the
 * app's WebSocket library and the client to finish the closing handshake before
 * it is destroyed. It does not hold the drain (the timer is unref'd).
 */
export const UPGRADE_CLOSE_WAIT_MS = 2000;
/** A `Content-Type` that makes a response an event stream. */
export const EVENT_STREAM = /^\s*text\/event-stream/i;
const EVENT_STREAM_HEADER = /\r\ncontent-type:[ \t]*text\/event-stream/i;

const installed = new WeakSet<Server>();

/** Where a response in flight sits in its filter's `open` array. */
const SLOT = Symbol('graceful-cluster.slot');
type Tracked = ServerResponse & {[SLOT]?: number};
/**
 * On a connection: the last app response that arrived while an earlier one
 * still held the connection (pipelining). Set on the pipelined path only, so the
 * drain can tell which response is a connection's last without a per-request
 * sequence number.
 */
const LAST_QUEUED = Symbol('graceful-cluster.lastQueued');
/**
 * On a connection, during a drain: a response on it carries `Connection: close`,
 * so Node ends the connection after it (RFC 9112 section 9.6); a request that
 * arrives behind it is never processed.
 */
const CLOSING = Symbol('graceful-cluster.closing');
type TrackedSocket = Socket & {[LAST_QUEUED]?: ServerResponse | undefined; [CLOSING]?: true};
type EmitRequest = (this: Server, event: 'request', request: unknown, response: unknown) => boolean;

/**
 * Installed on every filtered server so that Node emits `'checkContinue'`
 * instead of writing `100 Continue` itself: the filter's emit decides (see
 * `checkContinue`). Does nothing; a named function so that it can be found and removed.
 */
function gracefulClusterCheckContinue(): void {}

function ignoreError(): void {}

/** True when the response is an event stream: its `Content-Type`, set or already sent. */
function isEventStream(response: ServerResponse): boolean {
	const type = response.getHeader('content-type');
	if (type !== undefined) {
		return typeof type === 'string' && EVENT_STREAM.test(type);
	}

	// `writeHead(status, {...})` without an earlier `setHeader` sends its headers
	// without storing them: read the header block that went out.
	const header = (response as {_header?: unknown})._header;
	return typeof header === 'string' && EVENT_STREAM_HEADER.test(header);
}

/** True when the client asks for an event stream (EventSource sends `Accept: text/event-stream`). */
export function wantsEventStream(headers: IncomingHttpHeaders): boolean {
	const {accept} = headers;
	return accept !== undefined && accept.includes('text/event-stream');
}

/**
 * What a new event stream gets in the reject phase, in a 200 that ends at once:
 * a 503 would make EventSource give up for good (WHATWG: any non-200 fails the
 * connection); a 200 stream that ends makes it reconnect after `retry`, to
 * another pod.
 */
export function eventStreamRetryBody(retryAfterSeconds: number): Buffer {
	return Buffer.from(`retry: ${retryAfterSeconds * 1000}\n\n`);
}

/** A server-to-client WebSocket close frame (unmasked): FIN + opcode 8, the code, a short reason. */
function closeFrame(code: number, reason: string): Buffer {
	const text = Buffer.from(reason);
	return Buffer.concat([Buffer.from([0x88, 2 + text.length, code >> 8, code & 0xFF]), text]);
}

const CLOSE_FRAMES: Readonly<Record<DrainReason, Buffer>> = {
	shutdown: closeFrame(CLOSE_CODES.shutdown, 'server shutting down'),
	reload: closeFrame(CLOSE_CODES.reload, 'server restarting'),
};

/** True when the request carries a body (which may still be arriving). */
function hasBody(request: IncomingMessage): boolean {
	const {headers} = request;
	return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

/** True when `url` is `path` or `path?query`. An empty path never matches (probe turned off). */
export function isPath(url: string, path: string): boolean {
	return path !== '' && url.startsWith(path) && (url.length === path.length || url.charCodeAt(path.length) === QUESTION_MARK);
}

export class RequestFilter implements ServerFilter {
	/** Requests handed to the app whose response has not closed yet. */
	inflight = 0;
	/** Responses to app requests that closed during the drain. */
	served = 0;
	/** Requests answered with the drain 503 (or, for an event stream, a `retry:` and an end). */
	rejected = 0;
	/**
	 * Requests handed to the app since attach(): one field increment beside
	 * `inflight`'s (no measurable cost: docs/benchmarks.md); the heartbeat reads
	 * it once a second for `--max-requests`.
	 */
	requests = 0;

	private mode: Mode = Mode.SERVING;
	// Responses in flight, so that the drain can mark each connection's last one
	// with `Connection: close` if its headers are not sent yet (Node's own
	// `server.close()` does not: RESEARCH.md fact 4). A dense array, each
	// response holding its index under SLOT: adding and removing cost an array write, where a Set hashed every
	// response (about 75 ns a request, measured in bench/; docs/benchmarks.md).
	private readonly open: ServerResponse[] = [];
	private readonly rejectHeaders: string[];
	private readonly eventStreamHeaders: string[];
	private readonly eventStreamBody: Buffer;
	private readonly rejectUpgradeBytes: Buffer;
	private readonly originalEmit: Server['emit'];
	private readonly onResponseClose: (this: ServerResponse) => void;
	/** Upgraded connections still open, each with whether it is a WebSocket. */
	private readonly upgraded = new Map<Socket, boolean>();
	/** Responses sorted out of `open` as event streams, still open. */
	private readonly eventStreams = new Set<ServerResponse>();
	/** True while `intercept` runs for a `'checkContinue'`: no body is coming until we say so. */
	private expectingContinue = false;

	constructor(readonly server: Server, private readonly options: FilterOptions) {
		if (installed.has(server)) {
			throw new TypeError('graceful-cluster: attach() was already called for this server.');
		}

		installed.add(server);
		this.rejectHeaders = [
			'Connection', 'close',
			'Retry-After', String(options.retryAfterSeconds),
			'Content-Type', 'text/plain; charset=utf-8',
			'Content-Length', String(REJECT_BODY.length),
			'Cache-Control', 'no-store',
		];
		this.eventStreamBody = eventStreamRetryBody(options.retryAfterSeconds);
		this.eventStreamHeaders = [
			'Connection', 'close',
			'Content-Type', 'text/event-stream',
			'Content-Length', String(this.eventStreamBody.length),
			'Cache-Control', 'no-store',
		];
		this.rejectUpgradeBytes = Buffer.concat([
			Buffer.from(`HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: ${options.retryAfterSeconds}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${REJECT_BODY.length}\r\nCache-Control: no-store\r\n\r\n`, 'latin1'),
			REJECT_BODY,
		]);
		this.originalEmit = server.emit;
		const filter = this;
		// One listener for all responses, made once per server; EventEmitter calls it
		// with the response as `this`. 'close' fires for finished and for aborted
		// responses alike; 'finish' would miss a client that went away, and the count
		// would never reach zero (stoppable's bug).
		this.onResponseClose = function (this: ServerResponse) {
			if (!filter.forget(this)) {
				return;
			}

			filter.inflight--;
			if (filter.mode !== Mode.SERVING) {
				filter.served++;
				if (filter.inflight === 0) {
					filter.options.onIdle();
				}
			}
		};
		const originalEmit = this.originalEmit;
		// eslint-disable-next-line func-names
		server.emit = function (this: Server, event: string | symbol, request?: unknown, response?: unknown): boolean {
			if (event === 'request') {
				if (filter.intercept(request as IncomingMessage, response as ServerResponse)) {
					return true;
				}

				// Node emits 'request' with exactly (request, response): passing them
				// on directly spares the per-request `arguments` object.
				return (originalEmit as EmitRequest).call(this, event, request, response);
			}

			// Rare events from here on: a WebSocket handshake, an `Expect: 100-continue`.
			if (event === 'upgrade') {
				if (filter.upgrade(request as IncomingMessage, response as Socket)) {
					return true;
				}
			} else if (event === 'checkContinue') {
				return filter.checkContinue(request as IncomingMessage, response as ServerResponse);
			}

			// eslint-disable-next-line prefer-rest-params
			return Reflect.apply(originalEmit, this, arguments) as boolean;
		} as Server['emit'];
		server.on('checkContinue', gracefulClusterCheckContinue);
	}

	/** Upgraded connections (WebSockets) still open. */
	get upgrades(): number {
		return this.upgraded.size;
	}

	/** Event streams still open, among those sorted out by `sortLongLived()`. */
	get streams(): number {
		return this.eventStreams.size;
	}

	get draining(): boolean {
		return this.mode !== Mode.SERVING;
	}

	setMode(mode: Mode): void {
		const wasServing = this.mode === Mode.SERVING;
		this.mode = mode;
		if (wasServing && mode !== Mode.SERVING) {
			for (const response of this.open) {
				this.closeAfterLast(response);
			}
		}
	}

	/**
	 * At the drain's start: `Connection: close` on the response if it is the last
	 * its connection holds. Only the last: Node ends the connection after the
	 * first response that carries it and drops the responses queued behind,
	 * though the app has computed them (pipelining). If the last one's headers
	 * are already sent, the close goes on whatever arrives next on the
	 * connection, or the connection is closed with the idle ones when the drain
	 * stops listening (retiring: when the linger ends).
	 */
	private closeAfterLast(response: ServerResponse): void {
		const socket = response.req.socket as TrackedSocket | null;
		if (socket !== null) {
			// Responses on a connection finish in arrival order, so while the last
			// queued one is open it is the last; once it has closed, only the
			// response that arrived after it (holding the connection) can be open.
			const last = socket[LAST_QUEUED];
			if (last !== undefined && last !== response && (last as Tracked)[SLOT] !== undefined) {
				return;
			}

			if (!response.headersSent) {
				socket[CLOSING] = true;
			}
		}

		if (!response.headersSent) {
			response.setHeader('Connection', 'close');
		}
	}

	/**
	 * Keeping idle connections: `net.Server.prototype.close`, which unlike
	 * `http.Server#close` leaves idle keep-alive connections open, so a client
	 * about to reuse one gets its response (with `Connection: close`) instead of
	 * a reset. Otherwise `http.Server#close`: in a cluster the primary stops
	 * handing this worker connections (and closes the port once every worker
	 * has), and the keep-alive connections idle now are dropped; the busy ones
	 * carry `Connection: close` on their last response.
	 */
	stopAccepting(keepIdle: boolean): void {
		if (keepIdle) {
			net.Server.prototype.close.call(this.server);
		} else {
			this.server.close();
		}
	}

	/**
	 * Whatever is still connected has no request in flight: an idle keep-alive
	 * socket, or a client that never finished sending its headers (slowloris).
	 */
	closeConnections(): void {
		this.server.closeAllConnections();
	}

	/**
	 * Moves the responses in flight that are event streams out of `inflight`,
	 * into `streams`: one pass over `open`, at drain time only. A response that
	 * has not set its `Content-Type` yet stays a request until a later pass. Does
	 * not call `onIdle`: the drain checks for idleness after sorting.
	 */
	sortLongLived(): void {
		// Backwards: `forget` moves the last response into the freed slot, and that
		// one has been looked at already.
		for (let index = this.open.length - 1; index >= 0; index--) {
			const response = this.open[index]!;
			if (isEventStream(response) && this.forget(response)) {
				this.inflight--;
				this.eventStreams.add(response);
				response.once('close', () => {
					this.eventStreams.delete(response);
				});
			}
		}
	}

	/**
	 * Ends the event streams still open (a clean end of a 200 stream: EventSource
	 * reconnects, after its `retry`, to another pod) and closes the upgraded
	 * connections: a WebSocket gets a close frame with the reason's code (1001,
	 * 1012) where one can be written safely, then its library and the client
	 * have `UPGRADE_CLOSE_WAIT_MS` to finish the closing handshake.
	 */
	closeLongLived(reason: DrainReason): LongLivedClosed {
		this.sortLongLived();
		const streams = this.eventStreams.size;
		for (const response of this.eventStreams) {
			if (!response.writableEnded) {
				response.end();
			}
		}

		const upgrades = this.upgraded.size;
		const closing: Socket[] = [];
		for (const [socket, webSocket] of this.upgraded) {
			if (sendCloseFrame(socket, webSocket ? CLOSE_FRAMES[reason] : undefined)) {
				closing.push(socket);
			}
		}

		// One timer for all of them (10,000 WebSockets are 10,000 sockets, not 10,000 timers).
		if (closing.length > 0) {
			setTimeout(destroyAll, UPGRADE_CLOSE_WAIT_MS, closing).unref();
		}

		return {upgrades, streams};
	}

	/** Restores the server's own `emit`. */
	uninstall(): void {
		if (this.server.emit !== this.originalEmit) {
			this.server.emit = this.originalEmit;
		}

		this.server.removeListener('checkContinue', gracefulClusterCheckContinue);

		installed.delete(this.server);
	}

	/** Returns true when the request was answered here and must not reach the app. */
	private intercept(request: IncomingMessage, response: ServerResponse): boolean {
		const url = request.url ?? '';
		if (isPath(url, this.options.readinessPath)) {
			const {readiness} = this.options;
			if (readiness !== undefined && this.mode === Mode.SERVING) {
				this.checkReadiness(request, response, readiness);
			} else {
				this.answerReadiness(request, response);
			}

			return true;
		}

		if (isPath(url, this.options.livenessPath)) {
			this.answer(request, response, 200, ALIVE_BODY);
			return true;
		}

		// One comparison while serving (one fewer than before pipelining was handled;
		// bench/filter-micro.js showed no change beyond noise): everything the drain
		// does sits behind it.
		if (this.mode !== Mode.SERVING) {
			if (!this.claimLast(request)) {
				return true;
			}

			if (this.mode === Mode.REJECT) {
				this.reject(request, response);
				return true;
			}

			response.setHeader('Connection', 'close');
		}

		this.inflight++;
		this.requests++;
		(response as Tracked)[SLOT] = this.open.length;
		this.open.push(response);
		response.on('close', this.onResponseClose);
		if (response.socket === null && request.socket) {
			this.watchQueued(request, response);
		}

		return false;
	}

	/**
	 * A pipelined request whose response waits behind another has no socket yet,
	 * and if the connection closes first (the client left, or the response ahead
	 * carried `Connection: close`), Node never emits 'close' on it: count it done
	 * when its connection closes. Rare, so a closure here is fine.
	 */
	private watchQueued(request: IncomingMessage, response: ServerResponse): void {
		const socket = request.socket as TrackedSocket;
		socket[LAST_QUEUED] = response;
		const onSocketClose = (): void => {
			this.onResponseClose.call(response);
		};

		socket.once('close', onSocketClose);
		response.once('close', () => {
			socket.removeListener('close', onSocketClose);
			if (socket[LAST_QUEUED] === response) {
				socket[LAST_QUEUED] = undefined;
			}
		});
	}

	/**
	 * During a drain, every response we let through is its connection's last
	 * (it carries `Connection: close`). True when this request may have that
	 * last response; false when the connection already has it: Node will end
	 * the connection before this request's turn, so it must not be processed
	 * nor answered (the client sees the connection close and may retry it).
	 * Its body is read so that the close is a FIN, not a reset.
	 */
	private claimLast(request: IncomingMessage): boolean {
		const socket = request.socket as TrackedSocket | null;
		if (socket === null) {
			return true;
		}

		if (socket[CLOSING] === true) {
			request.resume();
			return false;
		}

		socket[CLOSING] = true;
		return true;
	}

	/**
	 * The drain 503: `Connection: close`, `Retry-After`, and the promise that the
	 * app never saw the request. A request for an event stream gets a 200 stream
	 * that ends at once after `retry: <ms>` instead: EventSource never retries a 503.
	 */
	private reject(request: IncomingMessage, response: ServerResponse): void {
		this.rejected++;
		this.options.onReject?.(request);
		const stream = wantsEventStream(request.headers);
		const body = stream ? this.eventStreamBody : REJECT_BODY;
		response.writeHead(stream ? 200 : 503, stream ? this.eventStreamHeaders : this.rejectHeaders);
		if (hasBody(request) && !this.expectingContinue) {
			// Answer at once, but close only after reading the body: closing a socket
			// with unread data in it sends an RST, and a client still uploading sees
			// EPIPE or a reset instead of the 503 (RFC 9112 section 9.6).
			response.write(body);
			request.once('end', () => response.end());
			request.resume();
		} else {
			// With `Expect: 100-continue` no body comes, since no `100 Continue` was
			// sent: the 503 is the final answer, and Node discards whatever arrives
			// before it closes the connection (`Connection: close`).
			response.end(body);
		}
	}

	/**
	 * `'checkContinue'`: Node emits it (our listener is there) instead of
	 * writing `100 Continue` before `'request'`. Rejecting, or when the app
	 * listens for it too: the request goes through `intercept` (a reject answers
	 * without `100 Continue`; otherwise it is counted and the app's listener
	 * decides about the 100). Otherwise Node's own default: `100 Continue`, then
	 * `'request'`, which the filter sees as any other.
	 */
	checkContinue(request: IncomingMessage, response: ServerResponse): boolean {
		if (this.mode === Mode.REJECT || this.server.listenerCount('checkContinue') > 1) {
			this.expectingContinue = true;
			let answered: boolean;
			try {
				answered = this.intercept(request, response);
			} finally {
				this.expectingContinue = false;
			}

			return answered || Reflect.apply(this.originalEmit, this.server, ['checkContinue', request, response]) as boolean;
		}

		response.writeContinue();
		return this.server.emit('request', request, response);
	}

	/**
	 * `'upgrade'` (a WebSocket handshake; only emitted when the app listens for
	 * it). Rejecting: the drain 503 on the raw socket, and the app's listeners
	 * never see it. Otherwise it goes to the app, and the connection is counted
	 * as upgraded until it closes. True when answered here.
	 */
	upgrade(request: IncomingMessage, socket: Socket): boolean {
		if (this.mode === Mode.REJECT) {
			this.rejected++;
			this.options.onReject?.(request);
			// Node took its own listeners off the socket before emitting 'upgrade'.
			socket.on('error', ignoreError);
			socket.end(this.rejectUpgradeBytes, () => {
				socket.destroy();
			});
			return true;
		}

		const upgrade = request.headers.upgrade;
		this.upgraded.set(socket, upgrade !== undefined && upgrade.toLowerCase() === 'websocket');
		socket.once('close', () => {
			this.upgraded.delete(socket);
		});
		return false;
	}

	/**
	 * Takes a closed response out of `open` (the last one moves into its place).
	 * False when it was already out: its close was counted once.
	 */
	private forget(response: ServerResponse): boolean {
		const tracked = response as Tracked;
		const index = tracked[SLOT];
		if (index === undefined) {
			return false;
		}

		tracked[SLOT] = undefined;
		const last = this.open.pop()!;
		if (last !== response) {
			this.open[index] = last;
			(last as Tracked)[SLOT] = index;
		}

		return true;
	}

	/** The readiness probe's answer for the mode: 200 while serving or retiring, 503 while draining. */
	private answerReadiness(request: IncomingMessage, response: ServerResponse): void {
		const ready = this.mode === Mode.SERVING || this.mode === Mode.RETIRE;
		this.answer(request, response, ready ? 200 : 503, ready ? READY_BODY : DRAINING_BODY);
	}

	/**
	 * The readiness probe while serving, with checks: 200 once they pass, 503
	 * naming the failing ones; if the drain began meanwhile, the drain's answer.
	 */
	private checkReadiness(request: IncomingMessage, response: ServerResponse, readiness: Readiness): void {
		void readiness.probe().then(failures => {
			if (response.writableEnded || response.destroyed) {
				return;
			}

			if (failures === undefined || this.mode !== Mode.SERVING) {
				this.answerReadiness(request, response);
			} else {
				this.answer(request, response, 503, failures);
			}
		});
	}

	private answer(request: IncomingMessage, response: ServerResponse, status: number, body: Buffer): void {
		if (this.mode !== Mode.SERVING && !this.claimLast(request)) {
			return;
		}

		response.writeHead(status, {
			'Content-Type': 'text/plain; charset=utf-8',
			'Content-Length': body.length,
			'Cache-Control': 'no-store',
			...(this.mode === Mode.SERVING ? {} : {Connection: 'close'}),
		});
		response.end(body);
	}
}

/**
 * Starts closing one upgraded connection. A WebSocket gets `frame` (its close
 * frame) if the handshake answer went out and the connection is still
 * writable: the app's library writes whole frames in one go, and a control
 * frame may come between the fragments of a message (RFC 6455 section 5.4), so
 * the frame lands on a frame boundary. Then the library and the client close
 * it (true: the caller destroys it if they have not after
 * `UPGRADE_CLOSE_WAIT_MS`). Anything else is destroyed now (false).
 */
function sendCloseFrame(socket: Socket, frame: Buffer | undefined): boolean {
	if (frame === undefined || !socket.writable || socket.writableEnded || socket.bytesWritten === 0) {
		socket.destroy();
		return false;
	}

	socket.on('error', ignoreError);
	socket.write(frame);
	return true;
}

function destroyAll(sockets: readonly Socket[]): void {
	for (const socket of sockets) {
		socket.destroy();
	}
}
