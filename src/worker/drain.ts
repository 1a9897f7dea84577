/**
 * One process's drain: the phases after the signal, for every server attached in
 * this process, ending in the app's shutdown hooks and an exit.
 *
 *   serving -> serve -> reject -> closing -> hooks -> done
 *   serving -> retiring -> hooks -> done            (reload: a replacement is listening)
 *
 * `serve` and `reject` are timed from the drain's start; `closing` (listening
 * stopped, idle connections closed) lasts until nothing is in flight; `hooks`
 * runs the app's shutdown functions; `done` hands over to the host (cluster:
 * tell the primary and exit; standalone: exit).
 */
import {performance} from 'node:perf_hooks';
import type {IncomingMessage, Server} from 'node:http';
import net from 'node:net';
import type {Logger} from '../logger.js';
import type {DrainSettings} from '../settings.js';
import {Mode, RequestFilter} from './request-filter.js';

export type Phase =
	| {readonly name: 'serving'}
	| {readonly name: 'serve' | 'reject' | 'closing' | 'hooks'; readonly startedAt: number}
	/** Reload: replaced by a new worker; leaves once idle and the linger is over. */
	| {readonly name: 'retiring'; readonly startedAt: number; lingering: boolean}
	| {readonly name: 'done'};

export type PhaseName = Phase['name'];

export interface DrainTimeline {
	readonly servePeriodMs: number;
	readonly rejectPeriodMs: number;
}

export interface DrainSummary {
	readonly durationMs: number;
	readonly served: number;
	readonly rejected: number;
}

/** What differs between running under the primary and running alone. */
export interface DrainHost {
	/** Called about four times a second during a drain with the current counts. */
	progress(inflight: number, served: number, rejected: number): void;
	/** The drain is over and the hooks ran: exit. */
	finish(summary: DrainSummary): void;
}

export type ShutdownHook = () => unknown;

const REPORT_INTERVAL_MS = 250;
const SUMMARY_INTERVAL_MS = 1000;

export class ProcessDrain {
	private phase: Phase = {name: 'serving'};
	private readonly filters: RequestFilter[] = [];
	private readonly hooks: ShutdownHook[] = [];
	private readonly timers: NodeJS.Timeout[] = [];
	private startedAt = 0;
	private rejectedAtLastSummary = 0;
	private host: DrainHost | undefined;

	constructor(private readonly settings: DrainSettings, private readonly logger: Logger) {}

	get phaseName(): PhaseName {
		return this.phase.name;
	}

	get inflight(): number {
		let total = 0;
		for (const filter of this.filters) {
			total += filter.inflight;
		}

		return total;
	}

	private get served(): number {
		return this.filters.reduce((sum, filter) => sum + filter.served, 0);
	}

	private get rejected(): number {
		return this.filters.reduce((sum, filter) => sum + filter.rejected, 0);
	}

	setHost(host: DrainHost): void {
		this.host = host;
	}

	addServer(server: Server): RequestFilter {
		const logger = this.logger;
		const {keepAliveTimeoutMs} = this.settings;
		if (keepAliveTimeoutMs > 0) {
			server.keepAliveTimeout = keepAliveTimeoutMs;
			// Node answers 408 to a client whose headers take longer than
			// headersTimeout; below keepAliveTimeout that would hit an idle
			// connection's next request (nodejs/node#27363).
			if (server.headersTimeout <= keepAliveTimeoutMs) {
				server.headersTimeout = keepAliveTimeoutMs + 1000;
			}

			if (server.requestTimeout > 0 && server.requestTimeout < server.headersTimeout) {
				server.requestTimeout = server.headersTimeout;
			}
		}

		const filter = new RequestFilter(server, {
			retryAfterSeconds: this.settings.retryAfterSeconds,
			readinessPath: this.settings.readinessPath,
			livenessPath: this.settings.livenessPath,
			// Only built when debug is on: at info, a rejected request costs no log call.
			onReject: logger.isLevelEnabled('debug')
				? (request: IncomingMessage) => {
					logger.debug({method: request.method, path: request.url, remote: request.socket.remoteAddress}, 'request rejected');
				}
				: undefined,
			onIdle: () => {
				this.closeIfIdle();
			},
		});
		this.filters.push(filter);
		if (this.phase.name !== 'serving') {
			// Attached during a drain (a second server, or an app that was still
			// starting): it joins in the current phase.
			filter.setMode(this.phase.name === 'serve' ? Mode.DRAIN_SERVE : this.phase.name === 'retiring' ? Mode.RETIRE : Mode.REJECT);
			if (this.phase.name === 'retiring') {
				// As in retire(): stop accepting, keep idle keep-alive connections.
				net.Server.prototype.close.call(server);
			} else if (this.phase.name !== 'serve' && this.phase.name !== 'reject') {
				server.close();
			}
		}

		return filter;
	}

	removeServer(filter: RequestFilter): void {
		filter.uninstall();
		const index = this.filters.indexOf(filter);
		if (index !== -1) {
			this.filters.splice(index, 1);
		}
	}

	addHook(hook: ShutdownHook): void {
		if (typeof hook !== 'function') {
			throw new TypeError('graceful-cluster: onShutdown() takes a function.');
		}

		this.hooks.push(hook);
	}

	/**
	 * Starts the drain; `elapsedMs` is time already spent since the signal (the
	 * drain message arrived before the app attached). Idempotent.
	 */
	begin(timeline: DrainTimeline, elapsedMs = 0): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		const now = performance.now();
		this.startedAt = now - elapsedMs;
		const serveLeft = Math.max(0, timeline.servePeriodMs - elapsedMs);
		const rejectEndsIn = Math.max(0, timeline.servePeriodMs + timeline.rejectPeriodMs - elapsedMs);
		this.logger.info({
			servePeriodMs: timeline.servePeriodMs,
			rejectPeriodMs: timeline.rejectPeriodMs,
			inflight: this.inflight,
		}, 'drain started');

		if (serveLeft > 0) {
			this.enter({name: 'serve', startedAt: now});
			this.timers.push(setTimeout(() => {
				this.enter({name: 'reject', startedAt: performance.now()});
			}, serveLeft));
		} else {
			this.enter({name: 'reject', startedAt: now});
		}

		this.timers.push(setTimeout(() => {
			this.enter({name: 'closing', startedAt: performance.now()});
		}, rejectEndsIn));

		this.startReporting();
		this.timers.push(setInterval(() => {
			this.summariseRejections();
		}, SUMMARY_INTERVAL_MS));
	}

	/** In-flight counts to the host: at once, then whenever they change, at most four times a second. */
	private startReporting(): void {
		let last = this.inflight;
		this.host?.progress(last, this.served, this.rejected);
		this.timers.push(setInterval(() => {
			const inflight = this.inflight;
			if (inflight !== last) {
				last = inflight;
				this.host?.progress(inflight, this.served, this.rejected);
			}
		}, REPORT_INTERVAL_MS));
	}

	/**
	 * Leaves for a reload: stop accepting at once, serve what arrives on open
	 * connections with `Connection: close`, and once nothing is in flight and the
	 * linger is over, close what is left and exit.
	 *
	 * Listening stops through `net.Server.prototype.close`, which unlike
	 * `http.Server#close` leaves idle keep-alive connections open: a client that
	 * is about to reuse one gets its response (with `Connection: close`) instead
	 * of a reset. The linger gives busy clients that chance before we close the
	 * idle rest.
	 */
	retire(lingerMs: number): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		const phase: Phase = {name: 'retiring', startedAt: performance.now(), lingering: true};
		this.phase = phase;
		this.startedAt = phase.startedAt;
		this.setMode(Mode.RETIRE);
		for (const filter of this.filters) {
			net.Server.prototype.close.call(filter.server);
		}

		this.logger.info({inflight: this.inflight, lingerMs}, 'retiring: replaced by a new worker');
		this.timers.push(setTimeout(() => {
			phase.lingering = false;
			this.closeIfIdle();
		}, lingerMs));
		this.startReporting();
	}

	private enter(phase: Phase): void {
		this.phase = phase;
		switch (phase.name) {
			case 'serve': {
				this.setMode(Mode.DRAIN_SERVE);
				break;
			}

			case 'reject': {
				this.setMode(Mode.REJECT);
				this.logger.info({inflight: this.inflight}, 'rejecting new requests');
				break;
			}

			case 'closing': {
				this.summariseRejections();
				// Stop listening: in a cluster the primary stops handing this worker
				// connections, and once every worker has closed it closes the port.
				// `close()` also drops keep-alive connections that are idle now; the
				// ones still busy carry `Connection: close` on their last response.
				for (const filter of this.filters) {
					filter.server.close();
				}

				this.logger.info({inflight: this.inflight}, 'stopped listening; waiting for requests in flight');
				this.closeIfIdle();
				break;
			}

			case 'hooks': {
				void this.runHooks();
				break;
			}

			case 'serving':
			case 'retiring':
			case 'done': {
				break;
			}

			default: {
				const never: never = phase;
				throw new Error(`unknown phase ${String(never)}`);
			}
		}
	}

	private setMode(mode: Mode): void {
		for (const filter of this.filters) {
			filter.setMode(mode);
		}
	}

	private closeIfIdle(): void {
		const {phase} = this;
		const leaving = phase.name === 'closing' || (phase.name === 'retiring' && !phase.lingering);
		if (leaving && this.inflight === 0) {
			// Whatever is still connected has no request in flight: an idle
			// keep-alive socket that went idle after `close()`, or a client that
			// never finished sending its headers (slowloris). Neither may hold the
			// drain past its phases.
			for (const filter of this.filters) {
				filter.server.closeAllConnections();
			}

			this.enter({name: 'hooks', startedAt: performance.now()});
		}
	}

	private async runHooks(): Promise<void> {
		for (const hook of this.hooks) {
			try {
				// eslint-disable-next-line no-await-in-loop
				await hook();
			} catch (error) {
				this.logger.error({err: error}, 'a shutdown hook failed; running the rest');
			}
		}

		for (const timer of this.timers) {
			clearTimeout(timer);
		}

		this.phase = {name: 'done'};
		const summary: DrainSummary = {
			durationMs: Math.round(performance.now() - this.startedAt),
			served: this.served,
			rejected: this.rejected,
		};
		this.host?.finish(summary);
	}

	private summariseRejections(): void {
		const rejected = this.rejected;
		const recent = rejected - this.rejectedAtLastSummary;
		if (recent > 0) {
			this.rejectedAtLastSummary = rejected;
			this.logger.info({rejectedRecently: recent, rejected}, 'rejected requests while draining');
		}
	}
}
