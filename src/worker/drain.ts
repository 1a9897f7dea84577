/**
 * One process's drain: the phase machine that moves every server attached in
 * this process through the timeline after the signal, ending in the app's
 * shutdown hooks and an exit.
 *
 *   serving -> serve -> reject -> closing -> hooks -> done
 *   serving -> retiring -> hooks -> done            (reload: a replacement is listening)
 *
 * `serve` and `reject` are timed from the drain's start; `closing` (listening
 * stopped, idle connections closed) lasts until nothing is in flight; `hooks`
 * runs the app's shutdown functions, then the app's own signal listeners that
 * graceful-cluster held (hooks.ts, signal-listeners.ts); `done` hands over to
 * the host (cluster-host.ts: tell the primary and exit; standalone.ts: exit).
 *
 * What each phase means for a request is the filters' business (`modeFor`
 * maps one to the other, once); long-lived connections are long-lived.ts'
 * (told at the start, closed when the reject phase or the linger ends).
 */
import path from 'node:path';
import {systemClock, TimerGroup, type Clock} from '../clock.js';
import {copyCounts, sumCounts, type Counts} from '../counts.js';
import type {Logger} from '../logger.js';
import type {DrainSummary} from '../protocol.js';
import type {WorkerSettings} from '../settings.js';
import {rejectEndsAt, type Timeline} from '../timeline.js';
import {createFilter} from './create-filter.js';
import type {DrainableServer, ServerFilter} from './filter.js';
import {modeFor, stopsAccepting, type Phase, type PhaseName} from './phase.js';
import {namedHooks, runHooks, type NamedHook, type ShutdownHook} from './hooks.js';
import {CLOSE_CODES, DrainNotices, type DrainListener} from './long-lived.js';
import type {Readiness} from './readiness.js';

export type {DrainSummary} from '../protocol.js';


/** What differs between running under the primary and running alone (cluster-host.ts, standalone.ts). */
export interface DrainHost {
	/**
	 * Called about four times a second during a drain with the current counts
	 * (when one changed): requests in flight, and long-lived connections apart.
	 */
	progress(counts: Counts): void;
	/**
	 * Every request is done and there are hooks to run: they start when the host
	 * calls `proceed`. Under the primary, once the primary has read so, so that a
	 * hook's `process.exit()` cannot leave it thinking requests were lost.
	 */
	hooksStarting(counts: Counts, proceed: () => void): void;
	/** The drain is over and the hooks ran: exit. */
	finish(summary: DrainSummary): void;
	/** An attached server listens on `address` (its port, or a socket's path). */
	covers?(address: string): void;
}

const REPORT_INTERVAL_MS = 250;
const SUMMARY_INTERVAL_MS = 1000;

export class ProcessDrain {
	private phase: Phase = {name: 'serving'};
	private readonly filters: ServerFilter[] = [];
	private readonly hooks: ShutdownHook[] = [];
	readonly notices: DrainNotices;
	private closedLongLived = 0;
	/** Run after `hooks`: read when the hooks start, so listeners added late still count. */
	private lastHooks: () => readonly NamedHook[] = () => [];
	private readonly timers: TimerGroup;
	private startedAt = 0;
	/** `clock.now()` at which the deadline kills this process; unknown in a retire. */
	private deadlineAt: number | undefined;
	private rejectedAtLastSummary = 0;
	/** Requests counted by filters since taken off. */
	private detachedRequests = 0;
	private host: DrainHost | undefined;

	constructor(private readonly settings: WorkerSettings, private readonly logger: Logger, private readonly clock: Clock = systemClock) {
		this.timers = new TimerGroup(clock);
		this.notices = new DrainNotices(clock, logger);
	}

	get phaseName(): PhaseName {
		return this.phase.name;
	}

	/** Every filter's counts, summed. */
	get counts(): Counts {
		return sumCounts(this.filters);
	}

	get inflight(): number {
		return this.counts.inflight;
	}

	setHost(host: DrainHost): void {
		this.host = host;
	}

	/** Filters `server`; `readiness`: the app's readiness checks, run by its readiness probe while serving. */
	addServer(server: DrainableServer, readiness?: Readiness): ServerFilter {
		const filter = createFilter(server, this.settings, {
			logger: this.logger,
			readiness,
			onIdle: () => {
				this.closeIfIdle();
			},
		});
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

	/** Takes the filter off its server (`handle.detach()`); its requests still count in `requests`. */
	removeServer(filter: ServerFilter): void {
		filter.uninstall();
		const index = this.filters.indexOf(filter);
		if (index !== -1) {
			this.filters.splice(index, 1);
			this.detachedRequests += filter.requests;
		}
	}

	/** Requests handed to the app since the process started, detached servers' included: the heartbeat's count (`--max-requests`). */
	get requests(): number {
		let total = this.detachedRequests;
		for (const filter of this.filters) {
			total += filter.requests;
		}

		return total;
	}

	addHook(hook: ShutdownHook): void {
		if (typeof hook !== 'function') {
			throw new TypeError('graceful-cluster: onShutdown() takes a function.');
		}

		this.hooks.push(hook);
	}

	/** Tells `listener` when the drain starts (or a reload retires the worker); at once if that already happened. */
	addDrainListener(listener: DrainListener): void {
		this.notices.add(listener);
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
		this.sortLongLived();
		const {inflight, upgrades, streams} = this.counts;
		this.logger.info({
			servePeriodMs: timeline.servePeriodMs,
			rejectPeriodMs: timeline.rejectPeriodMs,
			gracePeriodMs: timeline.gracePeriodMs,
			inflight,
			upgrades,
			streams,
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
		}, rejectEndsAt(timeline));

		this.startReporting();
		this.timers.interval(() => {
			this.summariseRejections();
		}, SUMMARY_INTERVAL_MS);
		this.notices.start('shutdown', now + rejectEndsAt(timeline));
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
		this.enter(phase);
		const {inflight, upgrades, streams} = this.counts;
		this.logger.info({inflight, upgrades, streams, lingerMs}, 'retiring: replaced by a new worker');
		this.timers.timeout(() => {
			phase.lingering = false;
			this.closeLongLived();
			this.closeIfIdle();
		}, lingerMs);
		this.startReporting();
		this.notices.start('reload', phase.startedAt + lingerMs);
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
		const reason = this.notices.reason ?? 'shutdown';
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
			const counts = copyCounts(this.counts);
			// Rejections too: in an idle reject phase they are the only thing that moves.
			const key = `${counts.inflight} ${counts.upgrades} ${counts.streams} ${counts.rejected}`;
			if (key !== last) {
				last = key;
				this.host?.progress(counts);
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
		// Once, on the phase that stops listening: `server.close()` again would
		// emit the server's 'close' again.
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
				this.startHooks();
				break;
			}

			case 'done': {
				this.timers.clearAll();
				const {served, rejected} = this.counts;
				this.host?.finish({
					durationMs: Math.round(this.clock.now() - this.startedAt),
					served,
					rejected,
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

	/** Stops a server from taking new connections, as the phase wants it. */
	private stopAccepting(filter: ServerFilter): void {
		const stop = stopsAccepting(this.phase.name);
		if (stop !== 'no') {
			filter.stopAccepting(stop === 'keep-idle');
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

	private startHooks(): void {
		const hooks = [...namedHooks(this.hooks), ...this.lastHooks()];
		if (hooks.length === 0) {
			this.enter({name: 'done'});
			return;
		}

		const run = (): void => {
			void runHooks(hooks, {logger: this.logger, clock: this.clock, deadlineAt: this.deadlineAt}).then(() => {
				this.enter({name: 'done'});
			});
		};

		if (this.host) {
			this.host.hooksStarting(copyCounts(this.counts), run);
		} else {
			run();
		}
	}

	private summariseRejections(): void {
		const {rejected} = this.counts;
		const recent = rejected - this.rejectedAtLastSummary;
		if (recent > 0) {
			this.rejectedAtLastSummary = rejected;
			this.logger.info({rejectedRecently: recent, rejected}, 'rejected requests while draining');
		}
	}
}
