/**
 * The HTTP/1.1 adapter: in front of one `http.Server`'s (or `https.Server`'s)
 * requests, it decides before any app code runs whether a request is a probe, gets
 * the drain's answer, or goes to the app, kept in the ledger as in flight.
 *
 * It overrides `server.emit` rather than wrapping the `'request'` listeners there at
 * install time (terminus' way), so listeners the app adds later are covered, and so
 * are `'upgrade'` and `'checkContinue'`. It runs for every request: no closure or
 * timer per request, state in plain fields, logging only when enabled.
 */
import type {IncomingMessage, Server, ServerResponse} from 'node:http';
import net, {type Socket} from 'node:net';
import {isLive, LINGER_MAX_MS, Mode, type FilterOptions, type ServerFilter} from './filter.js';
import {claimLast, closeAfterLast, closeKeepingUnflushed, ClosingConnections, freshConnections, insistOnClose, isClosing, watchQueued} from './http1-connections.js';
import {inBackground, systemClock} from '../clock.js';
import {Arrivals, PEER_COUNTER, type Counted, type PeerCounter} from './arrivals.js';
import {Ledger} from './ledger.js';
import {endOwnedStream, isEventStreamResponse, Upgrades, wantsEventStream, type DrainReason, type LongLivedClosed} from './long-lived.js';
import {answerHere, answerProbe, answerShed, answerUpgrade, DrainAnswers, RETIRE_STREAM, RETIRE_UPGRADE_BYTES} from './http1-answers.js';
import {ServerClose} from './http1-server.js';
import {agedCounter, ConnectionAges} from './connection-age.js';
import {Probes, type ProbeAnswer} from './probes.js';
import type {ReadinessProbe} from './readiness.js';

/** socket.io's default path (its `path` option). */
const SOCKET_IO_PATH = '/socket.io/';

type EmitRequest = (this: Server, event: 'request', request: unknown, response: unknown) => boolean;

/**
 * Makes Node emit `'checkContinue'` instead of writing `100 Continue` itself, so a
 * rejected request gets its 503 without a `100`. Named, so it can be found and removed.
 */
function gracefulClusterCheckContinue(): void {}

/**
 * Node still emits `'finish'` for a response ended in one large write whose client
 * left before reading it (`'finish'` means handed to the socket's buffer, not to the
 * kernel), so the socket's error says it was cut.
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
	 * Responses in flight, so the drain can mark each connection's last one with
	 * `Connection: close` if its headers are not sent yet. `server.close()` does not:
	 * nodejs/node `lib/_http_server.js` `Server.prototype.close` only closes idle connections.
	 */
	private readonly ledger: Ledger<ServerResponse>;
	private readonly probes: Probes;
	private readonly arrivals: Arrivals;
	private readonly upgraded: Upgrades;
	private readonly answers: DrainAnswers;
	private readonly originalEmit: Server['emit'];
	private readonly serverClose: ServerClose;
	private readonly ages: ConnectionAges;
	/** True while `intercept` runs for a `'checkContinue'`: no body is coming until we say so. */
	private expectingContinue = false;
	private readonly isOpen = (response: ServerResponse): boolean => this.ledger.has(response);
	private readonly closing: ClosingConnections;
	/** Answered by `--max-event-loop-delay` (Mode.SHED). */
	shed = 0;

	private readonly currentMode = (): Mode => this.mode;

	constructor(readonly server: Server, private readonly options: FilterOptions) {
		this.ledger = new Ledger(options.onIdle, responseCompleted);
		this.upgraded = new Upgrades(options.onIdle);
		this.probes = new Probes(options);
		this.arrivals = options.arrivals ?? new Arrivals(inBackground(systemClock));
		this.answers = new DrainAnswers(options.retryAfterSeconds);
		this.closing = new ClosingConnections(options.onIdle, () => options.lingerMs?.() ?? LINGER_MAX_MS);
		this.ages = new ConnectionAges(options.maxConnectionAgeMs ?? 0, this.closing.afterLast);
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

				// Passing (request, response) directly spares the per-request `arguments` object.
				return (originalEmit as EmitRequest).call(this, event, request, response);
			}

			if (event === 'upgrade') {
				if (filter.upgrade(request as IncomingMessage, response as Socket)) {
					return true;
				}
			} else if (event === 'checkContinue') {
				return filter.checkContinue(request as IncomingMessage, response as ServerResponse);
			} else if (event === 'clientError' && isClosing(response as Socket)) {
				// Whatever follows a closing connection's last request is dropped, garbage too:
				// Node's answer to it (a destroy, a reset with the rest unread) would cut the last response's tail.
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

	get connectionsAged(): number {
		return this.ages.closed;
	}

	get redirected(): number {
		return this.ledger.redirected;
	}

	get requests(): number {
		return this.ledger.requests;
	}

	get upgrades(): number {
		return this.upgraded.size;
	}

	get streams(): number {
		return this.ledger.streams;
	}

	setReadiness(readiness: ReadinessProbe): void {
		this.probes.readiness = readiness;
	}

	setMode(mode: Mode): void {
		// Shedding leaves the requests in flight as they are: only a drain or a retire ends their connections.
		const wasServing = isLive(this.mode);
		this.mode = mode;
		this.ledger.draining = !isLive(mode);
		if (wasServing && !isLive(mode)) {
			for (const response of this.ledger.entries) {
				closeAfterLast(response, this.isOpen, this.closing.afterLast);
			}
		}
	}

	/**
	 * Keeping idle connections (a reload's linger): net's own close, which leaves them
	 * open, so a client about to reuse one gets its answer, not a reset. Otherwise
	 * node:http's, which closes the idle ones now.
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

	/** Nothing is in flight: what is still connected (idle, a last response on its way, a slowloris) is closed gracefully. */
	closeConnections(): void {
		this.closing.all(this.server);
	}

	get closingConnections(): number {
		return this.closing.size;
	}

	sortLongLived(): void {
		this.ledger.sortEventStreams(isEventStreamResponse);
	}

	closeLongLived(reason: DrainReason): LongLivedClosed {
		this.sortLongLived();
		const streams = this.ledger.endEventStreams(endResponse);
		return {upgrades: this.upgraded.close(reason), streams};
	}

	cutLongLived(): LongLivedClosed {
		return {upgrades: this.upgraded.cut(), streams: this.ledger.cutEventStreams(destroyResponse)};
	}

	uninstall(): void {
		if (this.server.emit !== this.originalEmit) {
			this.server.emit = this.originalEmit;
		}

		this.serverClose.restore();
		this.server.removeListener('checkContinue', gracefulClusterCheckContinue);
	}

	private intercept(request: IncomingMessage, response: ServerResponse): boolean {
		const probe = this.probes.match(request.url ?? '');
		if (probe !== undefined) {
			const answer = this.probes.answer(probe, this.currentMode);
			if (answer instanceof Promise) {
				void answer.then(later => {
					if (!response.writableEnded && !response.destroyed) {
						this.answer(request, response, later);
					}
				});
			} else {
				this.answer(request, response, answer);
			}

			return true;
		}

		// One comparison while serving (bench/filter-micro.js): everything the drain does sits behind it.
		if (this.mode === Mode.SERVING) {
			const counter = (request.socket as Counted)[PEER_COUNTER];
			if (counter !== undefined) {
				counter.n++;
			} else if (!this.unseen(request, response)) {
				return true;
			}
		} else {
			if (this.mode === Mode.SHED) {
				this.shedRequest(request, response);
				return true;
			}

			// What the load balancer sent, whatever the answer: a pipelined request dropped below included.
			this.arrivals.arrived(request.socket?.remoteAddress, request.headers['user-agent']);
			if (!claimLast(request, this.closing.afterLast)) {
				return true;
			}

			if (this.mode === Mode.REJECT) {
				this.reject(request, response);
				return true;
			}

			// Retiring: an event stream would last until the linger's end and be cut then;
			// told to reconnect now, its client is back within RETIRE_RETRY_MS at a worker that stays.
			if (this.mode === Mode.RETIRE && wantsEventStream(request.headers)) {
				this.ledger.redirected++;
				answerHere(request, response, RETIRE_STREAM, this.expectingContinue);
				return true;
			}

			insistOnClose(response);
		}

		this.ledger.add(response);
		if (response.socket === null && request.socket) {
			watchQueued(request, response, this.ledger.onClose);
		}

		return false;
	}

	/**
	 * A request the serving path has no counter for: a connection's first, or the next
	 * one on a connection past its age. False: the request is not to run.
	 */
	private unseen(request: IncomingMessage, response: ServerResponse): boolean {
		const {socket} = request;
		const aged = agedCounter(socket);
		if (aged === undefined) {
			this.firstRequest(socket, request).n++;
			this.ages.start(socket);
			return true;
		}

		aged.n++;
		return this.ages.close(request, response);
	}

	/**
	 * A connection's first request while serving. socket.io's long-polling transport
	 * opens with `GET /socket.io/?...transport=polling`; under several workers its later
	 * polls land on workers that do not know its session (the primary warns once).
	 */
	private firstRequest(socket: Counted, request: IncomingMessage): PeerCounter {
		const url = request.url ?? '';
		if (url.startsWith(SOCKET_IO_PATH) && url.includes('transport=polling')) {
			this.options.onNotice?.('socket.io-polling');
		}

		return this.arrivals.counterFor(socket, request.socket, request.headers['user-agent']);
	}

	private readonly countRejected = (): void => {
		this.ledger.rejected++;
	};

	/** `--max-event-loop-delay` (http1-answers.ts `answerShed`); counted as answered, so an episode's count is whole when it ends. */
	private shedRequest(request: IncomingMessage, response: ServerResponse): void {
		if (answerShed(request, response, this.answers, this.expectingContinue, this.closing.afterLast)) {
			this.shed++;
		}
	}

	/** EventSource never retries a 503: a request for an event stream gets a 200 that ends at once after `retry: <ms>`. */
	private reject(request: IncomingMessage, response: ServerResponse): void {
		this.options.onReject?.({method: request.method, path: request.url, remote: request.socket?.remoteAddress});
		// Counted once written: a client that reset the connection never got it.
		answerHere(request, response, wantsEventStream(request.headers) ? this.answers.eventStream : this.answers.reject, this.expectingContinue, this.countRejected);
	}

	/**
	 * Rejecting, or when the app listens for `'checkContinue'` too: the request goes
	 * through `intercept` (a reject answers without `100 Continue`). Otherwise Node's own
	 * default: `100 Continue`, then `'request'`.
	 */
	checkContinue(request: IncomingMessage, response: ServerResponse): boolean {
		if (this.mode === Mode.REJECT || this.mode === Mode.SHED || this.server.listenerCount('checkContinue') > 1) {
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

	/** Emitted only when the app listens for `'upgrade'`. Rejecting: the drain 503 on the raw socket; retiring: sent to the other workers. */
	upgrade(request: IncomingMessage, socket: Socket): boolean {
		if (this.mode === Mode.SERVING) {
			const counted = socket as Counted;
			(counted[PEER_COUNTER] ?? this.arrivals.counterFor(counted, socket, request.headers['user-agent'])).n++;
		} else if (this.mode === Mode.SHED) {
			this.shed++;
			answerUpgrade(socket, this.answers.shedUpgrade);
			return true;
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

	private answer(request: IncomingMessage, response: ServerResponse, probe: ProbeAnswer): void {
		if (isLive(this.mode) || claimLast(request, this.closing.afterLast)) {
			answerProbe(response, probe, !isLive(this.mode));
		}
	}
}

function endResponse(response: ServerResponse): void {
	if (!response.writableEnded) {
		endOwnedStream(response);
	}
}
