/**
 * One process's drain: the phases after the signal, for every server attached in
 * this process, ending in the app's shutdown hooks and an exit.
 *
 *   serving -> serve -> reject -> closing -> hooks -> done
 *   serving -> retiring -> hooks -> done            (reload: a replacement is listening)
 *
 * `serve` and `reject` are timed from the drain's start; `closing` (listening
 * stopped, idle connections closed) lasts until nothing is in flight; `hooks`
 * runs the app's shutdown functions, then the app's own SIGTERM/SIGINT
 * listeners that graceful-cluster held (signal-listeners.ts); `done` hands over
 * to the host (cluster: tell the primary and exit; standalone: exit).
 *
 * Long-lived connections (upgraded sockets, event streams) are counted apart
 * from requests and never hold a phase: the app is told when the drain starts
 * (`onDrain` listeners, with the time left), and whatever is still open when
 * the reject phase ends (a reload: when the linger ends) is closed here.
 *
 * Hooks are where a drain hangs unseen (a pool that never closes), so they are
 * logged: when they start, once per hook still running after a second, and once
 * if any is still running as the deadline nears.
 */
import type {IncomingMessage, Server} from 'node:http';
import path from 'node:path';
import {systemClock, TimerGroup, type Clock} from '../clock.js';
import type {Logger} from '../logger.js';
import type {WorkerSettings} from '../settings.js';
import type {Timeline} from '../timeline.js';
import type {DrainSummary} from '../protocol.js';
import {CLOSE_CODES, drainableKind, Mode, type DrainableServer, type DrainReason, type ServerFilter} from './filter.js';
import {Http2Filter, type Http2AnyServer, type RejectedStream} from './http2-filter.js';
import type {Readiness} from './readiness.js';
import {RequestFilter} from './request-filter.js';

export type Phase =
	| {readonly name: 'serving'}
	| {readonly name: 'serve' | 'reject' | 'closing' | 'hooks'; readonly startedAt: number}
	/** Reload: replaced by a new worker; leaves once idle and the linger is over. */
	| {readonly name: 'retiring'; readonly startedAt: number; lingering: boolean}
	| {readonly name: 'done'};

export type PhaseName = Phase['name'];

/** What the request filters do in each phase: the one place the two are mapped. */
export function modeFor(phase: PhaseName): Mode {
	switch (phase) {
		case 'serving': {
			return Mode.SERVING;
		}

		case 'serve': {
			return Mode.DRAIN_SERVE;
		}

		case 'retiring': {
			return Mode.RETIRE;
		}

		case 'reject':
		case 'closing':
		case 'hooks':
		case 'done': {
			return Mode.REJECT;
		}

		default: {
			const never: never = phase;
			throw new Error(`unknown phase ${String(never)}`);
		}
	}
}

export type {DrainSummary} from '../protocol.js';

/** What an `onDrain` listener is told, once, when the drain starts or a reload retires the worker. */
export interface DrainNotice {
	/** `'shutdown'`: the process is going away (SIGTERM); `'reload'`: replaced by a new worker. */
	readonly reason: DrainReason;
	/**
	 * Milliseconds from this call until graceful-cluster closes the upgraded
	 * connections and event streams still open (the end of the reject phase; a
	 * reload's linger). Close yours before then, spread out if you like.
	 */
	readonly closeInMs: number;
	/** The WebSocket close code that fits the reason: 1001 (going away) or 1012 (service restart). */
	readonly closeCode: 1001 | 1012;
}

export type DrainListener = (notice: DrainNotice) => unknown;

/** What differs between running under the primary and running alone. */
export interface DrainHost {
	/**
	 * Called about four times a second during a drain with the current counts
	 * (when one changed): requests in flight, and long-lived connections apart.
	 */
	progress(inflight: number, served: number, rejected: number, upgrades: number, streams: number): void;
	/**
	 * Every request is done and there are hooks to run: they start when the host
	 * calls `proceed`. Under the primary, once the primary has read so, so that a
	 * hook's `process.exit()` cannot leave it thinking requests were lost.
	 */
	hooksStarting(served: number, rejected: number, proceed: () => void): void;
	/** The drain is over and the hooks ran: exit. */
	finish(summary: DrainSummary): void;
	/** An attached server listens on `address` (its port, or a socket's path). */
	covers?(address: string): void;
}

export type ShutdownHook = () => unknown;

/** A hook as the drain runs it: the app's `onShutdown()` functions, then its held signal listeners. */
export interface NamedHook {
	/** For the log: the function's name, or what it is when it has none. */
	readonly name: string;
	readonly run: () => unknown;
}

const REPORT_INTERVAL_MS = 250;
const SUMMARY_INTERVAL_MS = 1000;
/** A hook still running after this long gets a line of its own. */
export const SLOW_HOOK_MS = 1000;
/**
 * Warn when hooks still run this long before the deadline, or halfway from
 * their start to it if that is later, so the log says which hook the kill will
 * interrupt while there is still time to look.
 */
export const HOOK_DEADLINE_WARNING_MS = 5000;

export class ProcessDrain {
	private phase: Phase = {name: 'serving'};
	private readonly filters: ServerFilter[] = [];
	private readonly hooks: ShutdownHook[] = [];
	private readonly drainListeners: DrainListener[] = [];
	/** The reason and `clock.now()` moment long-lived connections are closed, once a drain or retire began. */
	private longLivedClose: {readonly reason: DrainReason; readonly at: number} | undefined;
	private closedLongLived = 0;
	/** Run after `hooks`: read when the hooks start, so listeners added late still count. */
	private lastHooks: () => readonly NamedHook[] = () => [];
	private readonly timers: TimerGroup;
	private startedAt = 0;
	/** `clock.now()` at which the deadline kills this process; unknown in a retire. */
	private deadlineAt: number | undefined;
	private rejectedAtLastSummary = 0;
	private host: DrainHost | undefined;

	constructor(private readonly settings: WorkerSettings, private readonly logger: Logger, private readonly clock: Clock = systemClock) {
		this.timers = new TimerGroup(clock);
	}

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

	/** Upgraded connections still open. */
	get upgrades(): number {
		let total = 0;
		for (const filter of this.filters) {
			total += filter.upgrades;
		}

		return total;
	}

	/** Event streams still open, among those sorted out of the requests in flight at drain time. */
	get streams(): number {
		let total = 0;
		for (const filter of this.filters) {
			total += filter.streams;
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

	/** Filters `server`; `readiness`: the app's readiness checks, run by its readiness probe while serving. */
	addServer(server: DrainableServer, readiness?: Readiness): ServerFilter {
		const logger = this.logger;
		const {keepAliveTimeoutMs} = this.settings;
		const http2 = drainableKind(server) === 'http2';
		// Keep-alive timeouts are HTTP/1.1's (an HTTP/2 session has no idle timeout unless the app sets one).
		if (!http2 && keepAliveTimeoutMs > 0) {
			server = server as Server;
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

		const debug = logger.isLevelEnabled('debug');
		const options = {
			retryAfterSeconds: this.settings.retryAfterSeconds,
			readinessPath: this.settings.readinessPath,
			livenessPath: this.settings.livenessPath,
			readiness,
			// Only built when debug is on: at info, a rejected request costs no log call.
			onReject: debug
				? (request: IncomingMessage) => {
					logger.debug({method: request.method, path: request.url, remote: request.socket.remoteAddress}, 'request rejected');
				}
				: undefined,
			onRejectStream: debug
				? (stream: RejectedStream) => {
					logger.debug(stream, 'request rejected');
				}
				: undefined,
			onIdle: () => {
				this.closeIfIdle();
			},
		};
		// HTTP/2 ends connections with GOAWAY, not `Connection: close`: a filter of its own.
		const filter: ServerFilter = http2 ? new Http2Filter(server as Http2AnyServer, options) : new RequestFilter(server as Server, options);
		this.filters.push(filter);
		const covers = (): void => {
			const address = server.address();
			if (address) {
				// A socket path as node:cluster reports it to the primary: resolved.
				this.host?.covers?.(typeof address === 'string' ? path.resolve(address) : String(address.port));
			}
		};

		if (server.listening) {
			covers();
		}

		server.on('listening', covers);
		// Attached during a drain (a second server, or an app that was still
		// starting): it joins in the current phase.
		filter.setMode(modeFor(this.phase.name));
		this.stopAccepting(filter);
		return filter;
	}

	removeServer(filter: ServerFilter): void {
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
	 * Tells `listener` when the drain starts (or a reload retires the worker);
	 * at once (on the next tick) if that already happened.
	 */
	addDrainListener(listener: DrainListener): void {
		if (typeof listener !== 'function') {
			throw new TypeError('graceful-cluster: onDrain() takes a function.');
		}

		this.drainListeners.push(listener);
		if (this.longLivedClose) {
			setImmediate(() => {
				this.notify(listener);
			});
		}
	}

	/** Hooks to run after the app's `onShutdown()` ones (its held signal listeners). */
	setLastHooks(source: () => readonly NamedHook[]): void {
		this.lastHooks = source;
	}

	/**
	 * Starts the drain on what is left of the timeline (`remaining()` of
	 * timeline.ts: a drain that starts late keeps the original moments).
	 * Idempotent.
	 */
	begin(timeline: Timeline): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		const now = this.clock.now();
		this.startedAt = now;
		this.deadlineAt = now + timeline.gracePeriodMs;
		this.longLivedClose = {reason: 'shutdown', at: now + timeline.servePeriodMs + timeline.rejectPeriodMs};
		this.sortLongLived();
		this.logger.info({
			servePeriodMs: timeline.servePeriodMs,
			rejectPeriodMs: timeline.rejectPeriodMs,
			gracePeriodMs: timeline.gracePeriodMs,
			inflight: this.inflight,
			upgrades: this.upgrades,
			streams: this.streams,
		}, 'drain started');

		if (timeline.servePeriodMs > 0) {
			this.enter({name: 'serve', startedAt: now});
			this.timers.timeout(() => {
				this.enter({name: 'reject', startedAt: this.clock.now()});
			}, timeline.servePeriodMs);
		} else {
			this.enter({name: 'reject', startedAt: now});
		}

		this.timers.timeout(() => {
			this.enter({name: 'closing', startedAt: this.clock.now()});
		}, timeline.servePeriodMs + timeline.rejectPeriodMs);

		this.startReporting();
		this.timers.interval(() => {
			this.summariseRejections();
		}, SUMMARY_INTERVAL_MS);
		this.notifyAll();
	}

	/**
	 * Leaves for a reload: stop accepting at once, serve what arrives on open
	 * connections with `Connection: close`, and once nothing is in flight and the
	 * linger is over, close what is left and exit.
	 */
	retire(lingerMs: number): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		const phase: Phase = {name: 'retiring', startedAt: this.clock.now(), lingering: true};
		this.startedAt = phase.startedAt;
		this.longLivedClose = {reason: 'reload', at: phase.startedAt + lingerMs};
		this.enter(phase);
		this.sortLongLived();
		this.logger.info({inflight: this.inflight, upgrades: this.upgrades, streams: this.streams, lingerMs}, 'retiring: replaced by a new worker');
		this.timers.timeout(() => {
			phase.lingering = false;
			this.closeLongLived();
			this.closeIfIdle();
		}, lingerMs);
		this.startReporting();
		this.notifyAll();
	}

	private notifyAll(): void {
		for (const listener of this.drainListeners) {
			this.notify(listener);
		}
	}

	/** One `onDrain` listener, told the time left; one that throws (or rejects) is logged, never fatal. */
	private notify(listener: DrainListener): void {
		const {reason, at} = this.longLivedClose!;
		const notice: DrainNotice = {reason, closeInMs: Math.max(0, Math.round(at - this.clock.now())), closeCode: CLOSE_CODES[reason]};
		const failed = (error: unknown): void => {
			this.logger.error({err: error, listener: listener.name || 'anonymous'}, 'an onDrain listener failed');
		};

		try {
			const result = listener(notice);
			if (result instanceof Promise) {
				result.catch(failed);
			}
		} catch (error) {
			failed(error);
		}
	}

	private sortLongLived(): void {
		for (const filter of this.filters) {
			filter.sortLongLived();
		}
	}

	/**
	 * The end of the reject phase (a reload: of the linger): the upgraded
	 * connections and event streams still open are closed, counted and logged
	 * with a pointer to `onDrain`. They never hold the drain.
	 */
	private closeLongLived(): void {
		const reason = this.longLivedClose?.reason ?? 'shutdown';
		let upgrades = 0;
		let streams = 0;
		for (const filter of this.filters) {
			const closed = filter.closeLongLived(reason);
			upgrades += closed.upgrades;
			streams += closed.streams;
		}

		if (upgrades + streams > 0) {
			this.closedLongLived += upgrades + streams;
			this.logger.info({upgrades, streams, reason, closeCode: CLOSE_CODES[reason]}, 'closed the long-lived connections still open; the app can close them itself, earlier, in handle.onDrain()');
		}
	}

	/** Counts to the host: at once, then whenever one changes, at most four times a second. */
	private startReporting(): void {
		let last = '';
		const report = (): void => {
			this.sortLongLived();
			const inflight = this.inflight;
			const upgrades = this.upgrades;
			const streams = this.streams;
			// Rejections too: in an idle reject phase they are the only thing that moves.
			const key = `${inflight} ${upgrades} ${streams} ${this.rejected}`;
			if (key !== last) {
				last = key;
				this.host?.progress(inflight, this.served, this.rejected, upgrades, streams);
			}
		};

		report();
		this.timers.interval(() => {
			report();
			// A response that became an event stream no longer counts as in flight.
			this.closeIfIdle();
		}, REPORT_INTERVAL_MS);
	}

	/** Every phase change goes through here: the filters' mode follows, then the phase's own work. */
	private enter(phase: Phase): void {
		this.phase = phase;
		const mode = modeFor(phase.name);
		const stops = phase.name === 'retiring' || phase.name === 'closing';
		for (const filter of this.filters) {
			filter.setMode(mode);
			if (stops) {
				this.stopAccepting(filter);
			}

			filter.sortLongLived();
		}

		switch (phase.name) {
			case 'reject': {
				this.logger.info({inflight: this.inflight}, 'rejecting new requests');
				break;
			}

			case 'closing': {
				this.summariseRejections();
				this.closeLongLived();
				this.logger.info({inflight: this.inflight}, 'stopped listening; waiting for requests in flight');
				this.closeIfIdle();
				break;
			}

			case 'hooks': {
				this.runHooks();
				break;
			}

			case 'done': {
				this.timers.clearAll();
				this.host?.finish({
					durationMs: Math.round(this.clock.now() - this.startedAt),
					served: this.served,
					rejected: this.rejected,
					closedLongLived: this.closedLongLived,
				});
				break;
			}

			case 'serving':
			case 'serve':
			case 'retiring': {
				break;
			}

			default: {
				const never: never = phase;
				throw new Error(`unknown phase ${String(never)}`);
			}
		}
	}

	/** Stops a server from taking new connections, as the phase wants it (filter.ts). */
	private stopAccepting(filter: ServerFilter): void {
		switch (this.phase.name) {
			case 'retiring': {
				// The linger gives clients about to reuse an idle connection their answer.
				filter.stopAccepting(true);
				break;
			}

			case 'closing':
			case 'hooks':
			case 'done': {
				filter.stopAccepting(false);
				break;
			}

			case 'serving':
			case 'serve':
			case 'reject': {
				break;
			}

			default: {
				const never: never = this.phase;
				throw new Error(`unknown phase ${String(never)}`);
			}
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
				filter.closeConnections();
			}

			this.enter({name: 'hooks', startedAt: this.clock.now()});
		}
	}

	private runHooks(): void {
		const hooks: NamedHook[] = [
			...this.hooks.map((hook, index) => ({name: hook.name || `onShutdown hook ${index + 1}`, run: hook})),
			...this.lastHooks(),
		];
		if (hooks.length === 0) {
			this.enter({name: 'done'});
		} else if (this.host) {
			this.host.hooksStarting(this.served, this.rejected, () => {
				void this.runHookList(hooks);
			});
		} else {
			void this.runHookList(hooks);
		}
	}

	private async runHookList(hooks: readonly NamedHook[]): Promise<void> {
		this.logger.info({hooks: hooks.map(hook => hook.name)}, 'running shutdown hooks');
		let running: NamedHook | undefined;
		if (this.deadlineAt !== undefined) {
			const left = this.deadlineAt - this.clock.now();
			this.timers.timeout(() => {
				if (running) {
					this.logger.warn({hook: running.name, deadlineInMs: Math.max(0, Math.round(this.deadlineAt! - this.clock.now()))}, 'shutdown hooks still running as the deadline nears');
				}
			}, Math.max(left - HOOK_DEADLINE_WARNING_MS, left / 2));
		}

		for (const hook of hooks) {
			running = hook;
			const startedAt = this.clock.now();
			const slow = this.timers.timeout(() => {
				this.logger.warn({hook: hook.name, runningForMs: Math.round(this.clock.now() - startedAt)}, 'a shutdown hook is taking more than a second');
			}, SLOW_HOOK_MS);
			try {
				// eslint-disable-next-line no-await-in-loop
				await hook.run();
			} catch (error) {
				this.logger.error({err: error, hook: hook.name}, 'a shutdown hook failed; running the rest');
			}

			this.timers.clear(slow);
		}

		running = undefined;
		this.enter({name: 'done'});
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
