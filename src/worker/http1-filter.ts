/**
 * The HTTP/1.1 adapter: sits in front of one `http.Server`'s (or
 * `https.Server`'s) `'request'` event and decides, before any app code runs,
 * whether a request is a probe (probes.ts), is rejected with a drain 503, or
 * goes to the app (and is kept in the ledger as in flight, ledger.ts).
 * What is HTTP/1.1's own stays here: `Connection: close` on each connection's
 * last response, pipelining, bodies still arriving, `Expect: 100-continue`, and
 * the `'upgrade'` event (long-lived.ts keeps the upgraded sockets).
 *
 * It overrides `server.emit` instead of wrapping the `'request'` listeners that
 * exist at install time (terminus' approach), so listeners the app adds later are
 * covered too. The same override sees the requests that never become
 * `'request'` events: `'upgrade'` (WebSockets: rejected with the drain 503 in
 * the reject phase, sent elsewhere by a retiring worker, tracked as upgraded
 * connections otherwise) and
 * `'checkContinue'` (a no-op listener installed here makes Node emit it, so a
 * rejected `Expect: 100-continue` gets its 503 without a `100 Continue` first).
 *
 * This runs for every request of every service that uses us: no closures or
 * timers per request, state in plain fields, logging only when enabled.
 */
import type {IncomingMessage, Server, ServerResponse} from 'node:http';
import net, {type Socket} from 'node:net';
import {FIRST_REQUEST_WAIT_MS, LINGER_MAX_MS, Mode, type FilterOptions, type ServerFilter} from './filter.js';
import {awaitFirstRequest, claimLast, closeAfterLast, closeAllLingering, closeKeepingUnflushed, closeLingering, freshConnections, isClosing, watchQueued} from './http1-connections.js';
import {inBackground, systemClock} from '../clock.js';
import {Arrivals, PEER_COUNTER, type Counted, type PeerCounter} from './arrivals.js';
import {Ledger} from './ledger.js';
import {endOwnedStream, eventStreamRetryBody, ignoreError, isEventStreamResponse, RETIRE_RETRY_MS, Upgrades, wantsEventStream, type DrainReason, type LongLivedClosed} from './long-lived.js';
import {Probes, type ProbeAnswer} from './probes.js';
import type {ReadinessProbe} from './readiness.js';
import {rawServiceUnavailable, REJECT_BODY} from '../reject-answer.js';

/** socket.io's default path (its `path` option). */
const SOCKET_IO_PATH = '/socket.io/';

/** The body of a retiring worker's answer to a WebSocket handshake (`retireUpgrade`). */
export const RETIRE_UPGRADE_BODY = Buffer.from('Service Unavailable: this worker is being replaced, retry now on a new connection.\n');

type EmitRequest = (this: Server, event: 'request', request: unknown, response: unknown) => boolean;

/**
 * Installed on every filtered server so that Node emits `'checkContinue'`
 * instead of writing `100 Continue` itself: the filter's emit decides (see
 * `checkContinue`). Does nothing; a named function so that it can be found and removed.
 */
function gracefulClusterCheckContinue(): void {}

/** The raw header block of a 200 event stream of `body`, ending the connection after it. */
function eventStreamHeaders(body: Buffer): string[] {
	return [
		'Connection', 'close',
		'Content-Type', 'text/event-stream',
		'Content-Length', String(body.length),
		'Cache-Control', 'no-store',
	];
}

/**
 * Answers an upgrade on its raw socket with `bytes`, then closes it; `written`
 * once they were handed to the OS. Node took its own listeners off the socket
 * before emitting 'upgrade'.
 */
function answerUpgrade(socket: Socket, bytes: Buffer, written?: () => void): void {
	socket.on('error', ignoreError);
	socket.end(bytes, () => {
		written?.();
		socket.destroy();
	});
}

/** What a retiring worker answers an event-stream request with (long-lived.ts RETIRE_RETRY_MS). */
const RETIRE_STREAM_BODY = eventStreamRetryBody(RETIRE_RETRY_MS);
const RETIRE_STREAM_HEADERS = eventStreamHeaders(RETIRE_STREAM_BODY);
/** A retiring worker's answer to a WebSocket handshake: `Retry-After: 0`, the other workers are serving (`retireUpgrade`). */
const RETIRE_UPGRADE_BYTES = rawServiceUnavailable(0, RETIRE_UPGRADE_BODY);

/**
 * Whether a response that closed had completed; asked during the drain only
 * (ledger.ts). Node emits `'finish'` once the last write is handed to the
 * socket; a response closed by its connection first (the client left, the app
 * destroyed it or its socket) is not `writableFinished`. One ended in a write
 * larger than what the client read before leaving is: Node still emits its
 * `'finish'` (measured on Node 20.20: 20 MB ended, the client gone after the
 * first chunk), so the socket's error (ECONNRESET, EPIPE) is what says it was cut.
 * Any error, not only the network's: `'finish'` means handed to the socket's
 * buffer, not to the kernel, and an app's own `socket.destroy(error)` or write
 * after end drops what the buffer still holds. An error after the last byte
 * left (an app writing to a socket the drain had ended and flushed) also reads
 * as cut: Node keeps no public record of which it was, and counting a cut
 * response as served would hide it.
 */
function responseCompleted(response: ServerResponse): boolean {
	return response.writableFinished && !response.req.socket?.errored;
}

function destroyResponse(response: ServerResponse): void {
	response.destroy();
}

/** True when the request carries a body (which may still be arriving). */
function hasBody(request: IncomingMessage): boolean {
	const {headers} = request;
	return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

export class RequestFilter implements ServerFilter {
	private mode: Mode = Mode.SERVING;
	/**
	 * Responses in flight, so that the drain can mark each connection's last one
	 * with `Connection: close` if its headers are not sent yet (Node's own
	 * `server.close()` does not: RESEARCH.md fact 4).
	 */
	private readonly ledger: Ledger<ServerResponse>;
	private readonly probes: Probes;
	private readonly arrivals: Arrivals;
	private readonly upgraded: Upgrades;
	private readonly rejectHeaders: string[];
	private readonly eventStreamHeaders: string[];
	private readonly eventStreamBody: Buffer;
	private readonly rejectUpgradeBytes: Buffer;
	private readonly originalEmit: Server['emit'];
	private readonly originalClose: Server['close'];
	/** The server had a `close` of its own (the app's, or a library's wrapper) before ours. */
	private readonly ownClose: boolean;
	/** Set once the drain stopped the server listening (`stopAccepting`). */
	private closedByDrain = false;
	/**
	 * The drain stopped accepting before the server listened (an app that
	 * attached, then waited on its database before `listen()`): it is closed
	 * as soon as it listens, and the app's own `close()` meanwhile succeeds.
	 */
	private closeOnListen = false;
	/** The server has listened since attach() (or was listening then): not listening now, the app closed it. */
	private hasListened: boolean;
	/** The server's 'close' event has been emitted (after `closedByDrain`). */
	private closeEmitted = false;
	/** True while `intercept` runs for a `'checkContinue'`: no body is coming until we say so. */
	private expectingContinue = false;
	private readonly isOpen = (response: ServerResponse): boolean => this.ledger.has(response);
	/** Connections closing gracefully that have not closed yet (`closingConnections`). */
	private closing = 0;
	private readonly connectionClosed = (): void => {
		this.closing--;
		if (this.closing === 0) {
			this.options.onIdle();
		}
	};

	/** The mode as the probes read it when their checks are done; made once. */
	private readonly currentMode = (): Mode => this.mode;

	constructor(readonly server: Server, private readonly options: FilterOptions) {
		this.hasListened = server.listening;
		if (!this.hasListened) {
			server.once('listening', this.listened);
		}

		this.ledger = new Ledger(options.onIdle, responseCompleted);
		this.upgraded = new Upgrades(options.onIdle);
		this.probes = new Probes(options);
		this.arrivals = options.arrivals ?? new Arrivals(inBackground(systemClock));
		this.rejectHeaders = [
			'Connection', 'close',
			'Retry-After', String(options.retryAfterSeconds),
			'Content-Type', 'text/plain; charset=utf-8',
			'Content-Length', String(REJECT_BODY.length),
			'Cache-Control', 'no-store',
		];
		// The whole pod is going away: EventSource waits as long as any client is asked to.
		this.eventStreamBody = eventStreamRetryBody(options.retryAfterSeconds * 1000);
		this.eventStreamHeaders = eventStreamHeaders(this.eventStreamBody);
		this.rejectUpgradeBytes = rawServiceUnavailable(options.retryAfterSeconds, REJECT_BODY);
		this.originalEmit = server.emit;
		this.originalClose = server.close;
		this.ownClose = Object.hasOwn(server, 'close');
		const filter = this;
		// eslint-disable-next-line func-names
		server.close = function (this: Server, ...args: unknown[]): Server {
			if (filter.closedByDrain) {
				return filter.closeAgain(args[0] as ((error?: Error) => void) | undefined);
			}

			if (filter.closeOnListen && !this.listening) {
				return filter.closeUnopened(args[0] as ((error?: Error) => void) | undefined);
			}

			return Reflect.apply(filter.originalClose, this, args) as Server;
		} as Server['close'];
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

			// Rare events from here on: a WebSocket handshake, an `Expect: 100-continue`,
			// bytes that are not HTTP.
			if (event === 'upgrade') {
				if (filter.upgrade(request as IncomingMessage, response as Socket)) {
					return true;
				}
			} else if (event === 'checkContinue') {
				return filter.checkContinue(request as IncomingMessage, response as ServerResponse);
			} else if (event === 'clientError' && isClosing(response as Socket)) {
				// Whatever follows a closing connection's last request is read and
				// dropped, garbage too: Node's answer to it (a destroy, and a reset
				// with the rest unread) would throw away the last response's tail.
				return true;
			}

			// eslint-disable-next-line prefer-rest-params
			return Reflect.apply(originalEmit, this, arguments) as boolean;
		} as Server['emit'];
		server.on('checkContinue', gracefulClusterCheckContinue);
		this.ownTimeouts = tuneKeepAlive(server, options.keepAliveTimeoutMs ?? 0);
	}

	/** The server's own timeouts before `tuneKeepAlive`, given back by `uninstall`; undefined when left alone. */
	private readonly ownTimeouts: Timeouts | undefined;

	get inflight(): number {
		return this.ledger.inflight;
	}

	get served(): number {
		return this.ledger.served;
	}

	get aborted(): number {
		return this.ledger.aborted;
	}

	get rejected(): number {
		return this.ledger.rejected;
	}

	/** Event streams and WebSocket handshakes a retiring worker sent elsewhere (ledger.ts `redirected`). */
	get redirected(): number {
		return this.ledger.redirected;
	}

	get requests(): number {
		return this.ledger.requests;
	}

	/** Upgraded connections (WebSockets) still open. */
	get upgrades(): number {
		return this.upgraded.size;
	}

	/** Event streams still open, among those sorted out by `sortLongLived()`. */
	get streams(): number {
		return this.ledger.streams;
	}

	setReadiness(readiness: ReadinessProbe): void {
		this.probes.readiness = readiness;
	}

	setMode(mode: Mode): void {
		const wasServing = this.mode === Mode.SERVING;
		this.mode = mode;
		this.ledger.draining = mode !== Mode.SERVING;
		if (wasServing && mode !== Mode.SERVING) {
			for (const response of this.ledger.entries) {
				closeAfterLast(response, this.isOpen, this.lingerAfterLast);
			}
		}
	}

	/**
	 * Keeping idle connections: `net.Server.prototype.close`, which unlike
	 * `http.Server#close` leaves idle keep-alive connections open, so a client
	 * about to reuse one gets its response (with `Connection: close`) instead of
	 * a reset. Otherwise `http.Server#close`: in a cluster the primary stops
	 * handing this worker connections (and closes the port once every worker
	 * has), and the keep-alive connections idle now are dropped; the busy ones
	 * carry `Connection: close` on their last response, and a response still
	 * being written to a slow client is not cut (http1-connections.ts).
	 * Once only; a server the app closed itself is left as it is. One not
	 * listening yet is closed when it does: a worker still starting at the
	 * drain must not begin to take connections in its closing phase.
	 */
	stopAccepting(keepIdle: boolean): void {
		const {server} = this;
		if (this.closedByDrain) {
			return;
		}

		if (!server.listening) {
			// Closed by the app itself: left as it is. Never listened yet: closed when it does.
			if (this.hasListened) {
				return;
			}

			if (!this.closeOnListen) {
				this.closeOnListen = true;
				this.keepIdleOnListen = keepIdle;
				server.once('listening', this.onLateListen);
			}

			return;
		}

		this.closedByDrain = true;
		server.once('close', () => {
			this.closeEmitted = true;
		});
		if (keepIdle) {
			net.Server.prototype.close.call(server);
		} else {
			const fresh = freshConnections(server);
			closeKeepingUnflushed(this.ledger.entries, fresh, () => Reflect.apply(this.originalClose, server, []));
			if (fresh.length > 0) {
				this.closing += fresh.length;
				awaitFirstRequest(fresh, Math.min(FIRST_REQUEST_WAIT_MS, this.lingerMs()), this.lingerMs(), this.connectionClosed);
			}
		}
	}

	private readonly listened = (): void => {
		this.hasListened = true;
	};

	/** Set with `closeOnListen`: how the drain stopped accepting. */
	private keepIdleOnListen = false;
	private readonly onLateListen = (): void => {
		this.options.onLateListen?.(this.server.address());
		this.stopAccepting(this.keepIdleOnListen);
	};

	/**
	 * `server.close(callback)` on a server that has not listened, once the drain
	 * has stopped accepting: closing it is the drain's job now (`closeOnListen`),
	 * so the app's shutdown gets its callback without `ERR_SERVER_NOT_RUNNING`
	 * (http-terminator's `terminate()` rejected on it, and the rest of the app's
	 * cleanup never ran). 'close' is emitted as a plain close would (and once
	 * more should a listen still under way complete: the drain closes it then).
	 */
	private readonly closeUnopened = (callback?: (error?: Error) => void): Server => {
		const {server} = this;
		if (callback) {
			server.once('close', () => {
				callback();
			});
		}

		return Reflect.apply(this.originalClose, server, []) as Server;
	};

	/**
	 * `server.close(callback)` once the drain closed the server: the app's own
	 * shutdown closing it again (stoppable, terminus, http-terminator, NestJS
	 * and hand-written handlers all do) gets its callback without an error,
	 * once the server has closed, instead of `ERR_SERVER_NOT_RUNNING`, which
	 * made terminus exit 1 and http-terminator skip the rest of the handler.
	 */
	private readonly closeAgain = (callback?: (error?: Error) => void): Server => {
		if (callback) {
			if (this.closeEmitted) {
				process.nextTick(callback);
			} else {
				this.server.once('close', () => {
					callback();
				});
			}
		}

		return this.server;
	};

	/**
	 * Whatever is still connected has no request in flight: an idle keep-alive
	 * socket, one whose last response is still on its way to the client, or a
	 * client that never finished sending its headers (slowloris). Each gets a
	 * FIN after what it still has to send, and is destroyed when the client
	 * closes its side, or stays quiet, within `lingerMs` (http1-connections.ts
	 * `closeLingering`); `closingConnections` counts them until then.
	 */
	closeConnections(): void {
		this.closing += closeAllLingering(this.server, this.lingerMs(), this.connectionClosed);
	}

	/** How long a connection closed now may linger (the drain's bound). */
	private lingerMs(): number {
		return this.options.lingerMs?.() ?? LINGER_MAX_MS;
	}

	/**
	 * A connection whose last response carries the drain's `Connection: close`:
	 * when that response is out, Node closes the socket (`destroySoon()`: a
	 * FIN, then a destroy as soon as the bytes are handed to the kernel), and
	 * unread bytes in its receive buffer (an upload the app never read) turn
	 * that destroy into a reset that throws away the response's tail. So the
	 * close is ours, as at the drain's end: counted in `closingConnections`
	 * until the socket has closed. Drain time only, once per connection.
	 */
	private readonly lingerAfterLast = (socket: Socket): void => {
		this.closing++;
		closeLingering(socket, this.lingerMs(), this.connectionClosed);
	};

	/** Connections closing gracefully (`closeConnections`, `lingerAfterLast`) that have not closed yet. */
	get closingConnections(): number {
		return this.closing;
	}

	sortLongLived(): void {
		this.ledger.sortEventStreams(isEventStreamResponse);
	}

	/**
	 * Ends the event streams still open (a clean end of a 200 stream: EventSource
	 * reconnects, after its `retry`, to another pod) and closes the upgraded
	 * connections (long-lived.ts).
	 */
	closeLongLived(reason: DrainReason): LongLivedClosed {
		this.sortLongLived();
		const streams = this.ledger.endEventStreams(endResponse);
		return {upgrades: this.upgraded.close(reason), streams};
	}

	/** Destroys the upgraded connections and event streams still open (long-lived.ts `cutLongLivedOf`). */
	cutLongLived(): LongLivedClosed {
		return {upgrades: this.upgraded.cut(), streams: this.ledger.cutEventStreams(destroyResponse)};
	}

	/** Restores the server's own `emit` and `close`. */
	uninstall(): void {
		if (this.server.emit !== this.originalEmit) {
			this.server.emit = this.originalEmit;
		}

		if (this.ownClose) {
			this.server.close = this.originalClose;
		} else {
			delete (this.server as Partial<Server>).close;
		}

		this.server.removeListener('checkContinue', gracefulClusterCheckContinue);
		if (this.ownTimeouts) {
			Object.assign(this.server, this.ownTimeouts);
		}

		this.server.removeListener('listening', this.onLateListen);
		this.server.removeListener('listening', this.listened);
		this.closeOnListen = false;
	}

	/** Returns true when the request was answered here and must not reach the app. */
	private intercept(request: IncomingMessage, response: ServerResponse): boolean {
		const probe = this.probes.match(request.url ?? '');
		if (probe !== undefined) {
			const answer = this.probes.answer(probe, this.currentMode);
			if (answer instanceof Promise) {
				void answer.then(later => {
					// The client may have gone while the readiness checks ran.
					if (!response.writableEnded && !response.destroyed) {
						this.answer(request, response, later);
					}
				});
			} else {
				this.answer(request, response, answer);
			}

			return true;
		}

		// One comparison while serving (one fewer than before pipelining was handled;
		// bench/filter-micro.js showed no change beyond noise): everything the drain
		// does sits behind it. Serving, a request costs its peer's counter (arrivals.ts).
		if (this.mode === Mode.SERVING) {
			const socket = request.socket as Counted;
			(socket[PEER_COUNTER] ?? this.firstRequest(socket, request)).n++;
		} else {
			// What the load balancer sent, whatever the answer: a pipelined request dropped below included.
			this.arrivals.arrived(request.socket?.remoteAddress, request.headers['user-agent']);
			if (!claimLast(request, this.lingerAfterLast)) {
				return true;
			}

			if (this.mode === Mode.REJECT) {
				this.reject(request, response);
				return true;
			}

			// Retiring: served, an event stream would last until the linger's end and
			// be cut then; told to reconnect now, its client is back within
			// RETIRE_RETRY_MS, on a new connection, to a worker that stays.
			if (this.mode === Mode.RETIRE && wantsEventStream(request.headers)) {
				this.ledger.redirected++;
				this.answerHere(request, response, 200, RETIRE_STREAM_HEADERS, RETIRE_STREAM_BODY);
				return true;
			}

			response.setHeader('Connection', 'close');
		}

		this.ledger.add(response);
		if (response.socket === null && request.socket) {
			watchQueued(request, response, this.ledger.onClose);
		}

		return false;
	}

	/**
	/**
	 * A connection's first request while serving: its peer's counter
	 * (arrivals.ts), and a look at what kind of client it is. socket.io's
	 * long-polling transport opens with `GET /socket.io/?...transport=polling`;
	 * under several workers its later polls land on other workers, which do not
	 * know its session (the primary warns once).
	 */
	private firstRequest(socket: Counted, request: IncomingMessage): PeerCounter {
		const url = request.url ?? '';
		if (url.startsWith(SOCKET_IO_PATH) && url.includes('transport=polling')) {
			this.options.onNotice?.('socket.io-polling');
		}

		return this.arrivals.counterFor(socket, request.socket, request.headers['user-agent']);
	}

	/** A drain 503 (or its event-stream form) was handed to the socket. */
	private readonly countRejected = (): void => {
		this.ledger.rejected++;
	};

	/**
	 * The drain 503: `Connection: close`, `Retry-After`, and the promise that the
	 * app never saw the request. A request for an event stream gets a 200 stream
	 * that ends at once after `retry: <ms>` instead: EventSource never retries a 503.
	 */
	private reject(request: IncomingMessage, response: ServerResponse): void {
		this.options.onReject?.({method: request.method, path: request.url, remote: request.socket?.remoteAddress});
		// Counted once written (`answerHere`): a client that reset the connection
		// (pipelining into a closing socket) never got it.
		if (wantsEventStream(request.headers)) {
			this.answerHere(request, response, 200, this.eventStreamHeaders, this.eventStreamBody, this.countRejected);
		} else {
			this.answerHere(request, response, 503, this.rejectHeaders, REJECT_BODY, this.countRejected);
		}
	}

	/**
	 * A whole answer made here, the app never called; its headers end the
	 * connection. A request body still arriving is read first.
	 */
	private answerHere(request: IncomingMessage, response: ServerResponse, status: number, headers: string[], body: Buffer, written?: () => void): void {
		response.writeHead(status, headers);
		if (hasBody(request) && !this.expectingContinue) {
			// Answer at once, but close only after reading the body: closing a socket
			// with unread data in it sends an RST, and a client still uploading sees
			// EPIPE or a reset instead of the 503 (RFC 9112 section 9.6). The answer
			// is whole once this write is out: a body that never ends (a client that
			// stalls mid-upload) holds the response's 'finish', not the answer.
			response.write(body, written && (error => {
				if (!error) {
					written();
				}
			}));
			request.once('end', () => response.end());
			request.resume();
		} else {
			// With `Expect: 100-continue` no body comes, since no `100 Continue` was
			// sent: the 503 is the final answer, and Node discards whatever arrives
			// before it closes the connection (`Connection: close`).
			if (written) {
				response.once('finish', written);
			}

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
	 * never see it. Retiring: see `retireUpgrade`. Otherwise it goes to the
	 * app, and the connection is counted as upgraded until it closes. True when
	 * answered here.
	 */
	upgrade(request: IncomingMessage, socket: Socket): boolean {
		if (this.mode === Mode.SERVING) {
			const counted = socket as Counted;
			(counted[PEER_COUNTER] ?? this.arrivals.counterFor(counted, socket, request.headers['user-agent'])).n++;
		} else {
			this.arrivals.arrived(socket.remoteAddress, request.headers['user-agent']);
		}

		if (this.mode === Mode.REJECT) {
			this.options.onReject?.({method: request.method, path: request.url, remote: socket.remoteAddress});
			answerUpgrade(socket, this.rejectUpgradeBytes, this.countRejected);
			return true;
		}

		if (this.mode === Mode.RETIRE) {
			this.retireUpgrade(socket);
			return true;
		}

		this.upgraded.track(request, socket);
		return false;
	}

	/**
	 * A WebSocket handshake on a connection a retiring worker kept for its
	 * linger: `503`, `Retry-After: 0`, `Connection: close`, the app never sees
	 * it. Handed to the app, it would open, be closed with 1012 when the linger
	 * ends (up to a second later) and reconnect then, having cost the app a
	 * session set up for nothing. Answered now, the client's reconnect opens a
	 * new connection at once, which the round-robin gives to a worker that
	 * stays. A reconnecting client (socket.io, reconnecting-websocket, ws with a
	 * retry loop) retries after a failed handshake as after a 1012, and one
	 * that reads the status (ws' `'unexpected-response'`, a proxy with
	 * `proxy_next_upstream http_503`) sees that it was not processed. The cost:
	 * a browser's script sees a failed handshake (close code 1006, no status)
	 * rather than a clean 1012, so a client that reconnects only after a clean
	 * close would not; such a client also gives up on any unreachable server.
	 */
	private retireUpgrade(socket: Socket): void {
		this.ledger.redirected++;
		answerUpgrade(socket, RETIRE_UPGRADE_BYTES);
	}

	/** A probe's answer; during a drain with `Connection: close`, if this request may still be answered (http1-connections.ts). */
	private answer(request: IncomingMessage, response: ServerResponse, {status, body}: ProbeAnswer): void {
		if (this.mode !== Mode.SERVING && !claimLast(request, this.lingerAfterLast)) {
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

type Timeouts = Pick<Server, 'keepAliveTimeout' | 'headersTimeout' | 'requestTimeout'>;

/**
 * `--keep-alive-timeout` on the server; returns its own timeouts, or undefined
 * when 0 leaves them. Node answers 408 to a client whose headers take longer
 * than headersTimeout: below keepAliveTimeout that would hit an idle
 * connection's next request (nodejs/node#27363).
 */
function tuneKeepAlive(server: Server, keepAliveTimeoutMs: number): Timeouts | undefined {
	if (keepAliveTimeoutMs <= 0) {
		return undefined;
	}

	const own = {keepAliveTimeout: server.keepAliveTimeout, headersTimeout: server.headersTimeout, requestTimeout: server.requestTimeout};
	server.keepAliveTimeout = keepAliveTimeoutMs;
	if (server.headersTimeout <= keepAliveTimeoutMs) {
		server.headersTimeout = keepAliveTimeoutMs + 1000;
	}

	if (server.requestTimeout > 0 && server.requestTimeout < server.headersTimeout) {
		server.requestTimeout = server.headersTimeout;
	}

	return own;
}

function endResponse(response: ServerResponse): void {
	if (!response.writableEnded) {
		endOwnedStream(response);
	}
}
