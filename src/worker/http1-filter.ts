/**
 * The HTTP/1.1 adapter: in front of one `http.Server`'s (or `https.Server`'s)
 * requests, it decides before any app code runs whether a request is a probe
 * (probes.ts), gets the drain's answer (http1-answers.ts), or goes to the app,
 * kept in the ledger as in flight (ledger.ts). HTTP/1.1's own ways stay here and
 * in http1-connections.ts: `Connection: close` on a connection's last response,
 * pipelining, bodies still arriving, `Expect: 100-continue`, `'upgrade'`.
 *
 * It overrides `server.emit`, not the `'request'` listeners there at install
 * time (terminus' way), so listeners the app adds later are covered, and so
 * are `'upgrade'` and `'checkContinue'` (a no-op listener of ours makes Node
 * emit it, so a rejected `Expect: 100-continue` gets its 503 without a `100`).
 * It runs for every request: no closure or timer per request, state in plain
 * fields, logging only when enabled.
 */
import type {IncomingMessage, Server, ServerResponse} from 'node:http';
import net, {type Socket} from 'node:net';
import {LINGER_MAX_MS, Mode, type FilterOptions, type ServerFilter} from './filter.js';
import {claimLast, closeAfterLast, closeKeepingUnflushed, ClosingConnections, freshConnections, isClosing, watchQueued} from './http1-connections.js';
import {inBackground, systemClock} from '../clock.js';
import {Arrivals, PEER_COUNTER, type Counted, type PeerCounter} from './arrivals.js';
import {Ledger} from './ledger.js';
import {endOwnedStream, isEventStreamResponse, Upgrades, wantsEventStream, type DrainReason, type LongLivedClosed} from './long-lived.js';
import {answerHere, answerProbe, answerUpgrade, DrainAnswers, RETIRE_STREAM, RETIRE_UPGRADE_BYTES} from './http1-answers.js';
import {ServerClose} from './http1-server.js';
import {Probes, type ProbeAnswer} from './probes.js';
import type {ReadinessProbe} from './readiness.js';

/** socket.io's default path (its `path` option). */
const SOCKET_IO_PATH = '/socket.io/';

type EmitRequest = (this: Server, event: 'request', request: unknown, response: unknown) => boolean;

/**
 * Installed on every filtered server so that Node emits `'checkContinue'`
 * instead of writing `100 Continue` itself: the filter's emit decides (see
 * `checkContinue`). Does nothing; a named function so that it can be found and removed.
 */
function gracefulClusterCheckContinue(): void {}

/**
 * Whether a response that closed had completed; asked during the drain only
 * (ledger.ts). Node still emits `'finish'` for a response ended in one large
 * write whose client left before reading it (20 MB, measured on Node 20.20):
 * the socket's error says it was cut, any error, since `'finish'` means handed
 * to the socket's buffer, not to the kernel.
 */
function responseCompleted(response: ServerResponse): boolean {
	return response.writableFinished && !response.req.socket?.errored;
}

function destroyResponse(response: ServerResponse): void {
	response.destroy();
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
	/** The drain's own answers, for this server's `Retry-After` (http1-answers.ts). */
	private readonly answers: DrainAnswers;
	private readonly originalEmit: Server['emit'];
	/** The server's own `close()` and timeouts, as the drain changes them (http1-server.ts). */
	private readonly serverClose: ServerClose;
	/** True while `intercept` runs for a `'checkContinue'`: no body is coming until we say so. */
	private expectingContinue = false;
	private readonly isOpen = (response: ServerResponse): boolean => this.ledger.has(response);
	/** Connections closing gracefully that have not closed yet. */
	private readonly closing: ClosingConnections;

	/** The mode as the probes read it when their checks are done; made once. */
	private readonly currentMode = (): Mode => this.mode;

	constructor(readonly server: Server, private readonly options: FilterOptions) {
		this.ledger = new Ledger(options.onIdle, responseCompleted);
		this.upgraded = new Upgrades(options.onIdle);
		this.probes = new Probes(options);
		this.arrivals = options.arrivals ?? new Arrivals(inBackground(systemClock));
		this.answers = new DrainAnswers(options.retryAfterSeconds);
		this.closing = new ClosingConnections(options.onIdle, () => options.lingerMs?.() ?? LINGER_MAX_MS);
		this.originalEmit = server.emit;
		this.serverClose = new ServerClose(server, options.keepAliveTimeoutMs ?? 0, keepIdle => {
			options.onLateListen?.(server.address());
			this.stopAccepting(keepIdle);
		});
		const filter = this;
		const originalEmit = this.originalEmit;
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

			// eslint-disable-next-line prefer-rest-params -- every argument emit() was given, however many
			return Reflect.apply(originalEmit, this, arguments) as boolean;
		} as Server['emit'];
		server.on('checkContinue', gracefulClusterCheckContinue);
	}

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
				closeAfterLast(response, this.isOpen, this.closing.afterLast);
			}
		}
	}

	/**
	 * Keeping idle connections (a reload's linger): net's own close, which leaves
	 * them open, so a client about to reuse one gets its answer, not a reset.
	 * Otherwise node:http's, which closes the idle ones now; the busy ones end
	 * after their last response, a slow client's not cut (http1-connections.ts).
	 */
	stopAccepting(keepIdle: boolean): void {
		const {server} = this;
		this.serverClose.stop(keepIdle, () => {
			if (keepIdle) {
				net.Server.prototype.close.call(server);
				return;
			}

			const fresh = freshConnections(server);
			closeKeepingUnflushed(this.ledger.entries, fresh, () => {
				this.serverClose.closeOriginal();
			});
			this.closing.fresh(fresh);
		});
	}

	/** Nothing is in flight: what is still connected (idle, a last response on its way, a slowloris) gets a FIN after its bytes, within the linger. */
	closeConnections(): void {
		this.closing.all(this.server);
	}

	/** Connections closing gracefully (`closeConnections`, after a last response) that have not closed yet. */
	get closingConnections(): number {
		return this.closing.size;
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

	/** Destroys the upgraded connections and event streams still open (long-lived.ts `LongLivedEnd`). */
	cutLongLived(): LongLivedClosed {
		return {upgrades: this.upgraded.cut(), streams: this.ledger.cutEventStreams(destroyResponse)};
	}

	/** Restores the server's own `emit` and `close`. */
	uninstall(): void {
		if (this.server.emit !== this.originalEmit) {
			this.server.emit = this.originalEmit;
		}

		this.serverClose.restore();
		this.server.removeListener('checkContinue', gracefulClusterCheckContinue);
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
			if (!claimLast(request, this.closing.afterLast)) {
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
				answerHere(request, response, RETIRE_STREAM, this.expectingContinue);
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
		// Counted once written: a client that reset the connection
		// (pipelining into a closing socket) never got it.
		answerHere(request, response, wantsEventStream(request.headers) ? this.answers.eventStream : this.answers.reject, this.expectingContinue, this.countRejected);
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
	 * `'upgrade'` (a WebSocket handshake; emitted only when the app listens for
	 * it). Rejecting: the drain 503 on the raw socket; retiring: sent to the
	 * other workers (http1-answers.ts RETIRE_UPGRADE_BYTES); otherwise to the
	 * app, counted as upgraded until it closes. True when answered here.
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
			answerUpgrade(socket, this.answers.rejectUpgrade, this.countRejected);
			return true;
		}

		if (this.mode === Mode.RETIRE) {
			this.ledger.redirected++;
			answerUpgrade(socket, RETIRE_UPGRADE_BYTES);
			return true;
		}

		this.upgraded.track(request, socket);
		return false;
	}

	/** A probe's answer; during a drain with `Connection: close`, if this request may still be answered (http1-connections.ts). */
	private answer(request: IncomingMessage, response: ServerResponse, probe: ProbeAnswer): void {
		if (this.mode === Mode.SERVING || claimLast(request, this.closing.afterLast)) {
			answerProbe(response, probe, this.mode !== Mode.SERVING);
		}
	}
}

function endResponse(response: ServerResponse): void {
	if (!response.writableEnded) {
		endOwnedStream(response);
	}
}
