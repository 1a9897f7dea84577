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
import {inBackground, systemClock, TimerGroup, type Clock, type Timer} from '../clock.js';
import {copyCounts, sumCounts, type Counts} from '../counts.js';
import type {Logger} from '../logger.js';
import type {DrainSummary, NoticeCode} from '../protocol.js';
import type {WorkerSettings} from '../settings.js';
import {LISTEN_SETTLE_MS, rejectEndsAt, type Timeline} from '../timeline.js';
import {createFilter} from './create-filter.js';
import {addressOf, LINGER_MAX_MS, type DrainableServer, type ServerFilter} from './filter.js';
import {modeFor, stopsAccepting, type Phase, type PhaseName} from './phase.js';
import type {AppShutdown, AppShutdownEnd} from './app-shutdown.js';
import {namedHooks, runHooks, type ShutdownHook} from './hooks.js';
import {Arrivals} from './arrivals.js';
import {closeLongLivedOf, cutLongLivedOf, DrainNotices, UPGRADE_CLOSE_WAIT_MS, type DrainListener} from './long-lived.js';
import {DrainProgress, REPORT_INTERVAL_MS, SUMMARY_INTERVAL_MS} from './progress.js';

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
	/**
	 * A hook or one of the app's own listeners failed: resolves once the host
	 * has passed it on (the primary must know before a later hook may exit).
	 */
	hookFailed?(name: string): Promise<void>;
	/**
	 * The drain is over and the hooks ran: exit. `exit` is `'own'` when the
	 * app's own shutdown ended with nothing of its left running: the process
	 * ends by itself once it is idle (whatever the app's `'beforeExit'`
	 * listeners still started finishes first).
	 */
	finish(summary: DrainSummary, exit: 'now' | 'own'): void;
	/** An attached server listens on `address` (its port, or a socket's path). */
	covers?(address: string): void;
	/** Something for the primary to tell the operator once (protocol.ts `NoticeMessage`). */
	notice?(code: NoticeCode): void;
	/** A drain's signal reached this retiring worker (`drainWhileRetiring`): `counts` are its counts then. */
	signalledWhileRetiring?(counts: Counts): void;
	/** The drained servers stopped taking connections (the reject phase's end, a retire): the process's others stop too. */
	stoppedAccepting?: (() => void) | undefined;
}


export class ProcessDrain {
	private phase: Phase = {name: 'serving'};
	private readonly filters: ServerFilter[] = [];
	private readonly hooks: ShutdownHook[] = [];
	private readonly notices: DrainNotices;
	private closedLongLived = 0;
	/** Of those, the ones still not closed `UPGRADE_CLOSE_WAIT_MS` later: destroyed. */
	private longLivedCut = 0;
	/**
	 * The long-lived connections' close: `open` until the end of the reject
	 * phase (a reload: of the linger), `waiting` for `UPGRADE_CLOSE_WAIT_MS`
	 * while they finish closing, `over` once what was left has been cut.
	 */
	private longLivedClose: 'open' | 'waiting' | 'over' = 'open';
	/** The app's own signal listeners, run after `hooks` (app-shutdown.ts). */
	private app: AppShutdown | undefined;
	/** The signal that started the drain or the reload: the app's listeners for it run. */
	private signal: NodeJS.Signals = 'SIGTERM';
	/** Hooks and app listeners that failed. */
	private hooksFailed = 0;
	/** How the app's own shutdown ended, if it had one to run. */
	private appEnded: AppShutdownEnd | undefined;
	private readonly timers: TimerGroup;
	private startedAt = 0;
	/** `clock.now()` at which the deadline kills this process; unknown in a retire. */
	private deadlineAt: number | undefined;
	/** The connections left were told to close (`closeIfIdle`); once per drain. */
	private connectionsClosed = false;
	private readonly progress: DrainProgress;
	/** Requests counted by filters since taken off. */
	private detachedRequests = 0;
	private host: DrainHost | undefined;
	/** The app requests that arrive, by peer: while serving, the rates; from the drain on, each arrival (arrivals.ts). */
	readonly arrivals: Arrivals;
	/** The timer that ends the reject phase at its period's end: cleared by an early end (`endReject`). */
	private rejectTimer: Timer | undefined;
	/** This process left for a reload (`retire`): a drain's signal that comes later finds it `retired`, and once it did, `signalled`. */
	private leftForReload: 'no' | 'retired' | 'signalled' = 'no';
	/** A drain that came while the app was still starting: its hooks wait until `clock.now()` reaches this (`settle`); 0: not waiting. */
	private settleUntil = 0;

	/** `peerRates`: count each peer's requests while serving (arrivals.ts), where something reads their rates. */
	constructor(private readonly settings: WorkerSettings, private readonly logger: Logger, private readonly clock: Clock = systemClock, {peerRates = true}: {peerRates?: boolean} = {}) {
		this.timers = new TimerGroup(clock);
		this.arrivals = new Arrivals(inBackground(clock), {perPeer: peerRates});
		this.notices = new DrainNotices(clock, logger);
		this.progress = new DrainProgress(() => this.counts, logger, () => this.arrivals.changes);
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

	/** What the drain did so far: the `drained` message and `drain finished`'s figures. */
	summary(): DrainSummary {
		const {served, aborted, rejected} = this.counts;
		return {
			durationMs: Math.round(this.clock.now() - this.startedAt),
			served,
			aborted,
			rejected,
			closedLongLived: this.closedLongLived,
			longLivedCut: this.longLivedCut,
			hooksFailed: this.hooksFailed,
		};
	}

	setHost(host: DrainHost): void {
		this.host = host;
	}

	/** Filters `server`. */
	addServer(server: DrainableServer): ServerFilter {
		const filter = createFilter(server, this.settings, {
			logger: this.logger,
			arrivals: this.arrivals,
			onNotice: this.notice,
			onIdle: () => {
				this.closeIfIdle();
			},
			lingerMs: this.lingerMs,
		});
		this.filters.push(filter);
		const covers = (): void => {
			const address = server.address();
			// Not once the app let go of it (attach.ts `exclude`): it listens uncounted.
			if (address && this.filters.includes(filter)) {
				this.host?.covers?.(addressOf(address));
			}
		};

		if (server.listening) {
			covers();
		}

		server.on('listening', covers);
		server.once('listening', this.listened);
		// Attached during a drain (a second server, or an app that was still
		// starting): it joins in the current phase.
		filter.setMode(modeFor(this.phase.name));
		this.stopAccepting(filter);
		return filter;
	}

	/** A server of this process listened: the first one starts the settle time of a drain that waits for it. */
	private readonly listened = (): void => {
		if (this.settleUntil > 0 && !this.anyListened) {
			this.settle(LISTEN_SETTLE_MS);
		}

		this.anyListened = true;
	};

	private anyListened = false;

	/**
	 * The host's word that the app is still starting (nothing listens yet) as
	 * the drain or retire begins: the hooks wait for its first listen and
	 * LISTEN_SETTLE_MS more, for its other servers and the shutdown code its
	 * listen callbacks register; or `waitForListenMs` if nothing listens by then.
	 */
	settle(waitForListenMs: number): void {
		if (this.phase.name === 'hooks' || this.phase.name === 'done') {
			return;
		}

		this.settleUntil = this.clock.now() + waitForListenMs;
		this.timers.timeout(() => {
			this.closeIfIdle();
		}, waitForListenMs);
	}

	/** Each notice once per process: the primary says it once for the cluster. */
	private readonly noticed = new Set<NoticeCode>();
	private readonly notice = (code: NoticeCode): void => {
		if (!this.noticed.has(code)) {
			this.noticed.add(code);
			this.host?.notice?.(code);
		}
	};

	/** A readiness check failed (readiness.ts): why, for the log only; the probe's 503 names the check. */
	logFailedChecks(failures: readonly string[]): void {
		this.logger.warn({failures}, 'readiness checks failed');
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

	/** The app's own shutdown, run after its `onShutdown()` hooks (its held signal listeners). */
	setAppShutdown(app: AppShutdown): void {
		this.app = app;
	}

	/**
	 * Starts the drain on what is left of the timeline (`remaining()` of
	 * timeline.ts: a drain that starts late keeps the original moments).
	 * `signal`: the one that started it; `signalAt`: when the primary received
	 * it (epoch ms), which the arrivals are timed from. Idempotent.
	 */
	begin(timeline: Timeline, signal: NodeJS.Signals = 'SIGTERM', signalAt?: number): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		this.signal = signal;
		const now = this.clock.now();
		this.startedAt = now;
		this.deadlineAt = now + timeline.gracePeriodMs;
		this.beginArrivals(signalAt);
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

		this.rejectTimer = this.timers.timeout(() => {
			this.enter({name: 'closing', startedAt: this.clock.now()});
		}, rejectEndsAt(timeline));

		this.startReporting();
		this.timers.interval(() => {
			this.progress.summariseRejections();
		}, SUMMARY_INTERVAL_MS);
		this.notices.start('shutdown', now + rejectEndsAt(timeline));
	}

	/**
	 * The primary's adaptive reject period (primary/arrivals.ts) found that the
	 * load balancers have stopped: the reject phase ends now instead of at its
	 * period's end. Only from the reject phase: the serve phase runs its course.
	 */
	endReject(): void {
		if (this.phase.name !== 'reject') {
			return;
		}

		this.timers.clear(this.rejectTimer);
		this.logger.info({afterMs: Math.round(this.clock.now() - this.startedAt)}, 'reject phase ended early: the load balancers stopped sending');
		this.enter({name: 'closing', startedAt: this.clock.now()});
	}

	/**
	 * Leaves for a reload: stop accepting at once, serve what arrives on open
	 * connections with `Connection: close`, and once nothing is in flight and the
	 * linger is over, close what is left and exit. `signal`: the one that
	 * started the reload.
	 */
	retire(lingerMs: number, signal: NodeJS.Signals = 'SIGTERM', notReady = false): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		this.signal = signal;
		this.leftForReload = 'retired';
		const phase: Phase = {name: 'retiring', startedAt: this.clock.now(), lingering: true};
		this.startedAt = phase.startedAt;
		this.enter(phase);
		const {inflight, upgrades, streams} = this.counts;
		if (notReady) {
			this.logger.info({inflight, upgrades, streams, lingerMs}, 'retiring: not ready in time; the old worker keeps serving');
		} else {
			this.logger.info({inflight, upgrades, streams, lingerMs}, 'retiring: replaced by a new worker');
		}
		this.timers.timeout(() => {
			phase.lingering = false;
			this.closeLongLived();
			this.closeIfIdle();
		}, lingerMs);
		this.startReporting();
		this.notices.start('reload', phase.startedAt + lingerMs);
	}

	/**
	 * A drain's signal reached this worker while it retires: it goes on
	 * retiring, bounded by the drain's deadline from now on, and the host tells
	 * the primary its counts of this moment, from which the drain counts. Once.
	 */
	drainWhileRetiring(timeline: Timeline, signalAt?: number): void {
		if (this.leftForReload !== 'retired') {
			return;
		}

		this.leftForReload = 'signalled';
		this.deadlineAt = this.clock.now() + timeline.gracePeriodMs;
		// A request on a connection it kept open is an arrival after the signal as much as any other.
		this.beginArrivals(signalAt);
		const counts = this.counts;
		const {served, aborted, rejected, inflight} = counts;
		this.logger.info({served, aborted, rejected, closedLongLived: this.closedLongLived, longLivedCut: this.longLivedCut, inflight, gracePeriodMs: timeline.gracePeriodMs}, 'drain signal while retiring: retiring on, within the grace period; the drain counts from here');
		this.host?.signalledWhileRetiring?.(counts);
	}

	/**
	 * Arrivals count from the primary's signal (`signalAt`, epoch ms): a worker
	 * that read the message late (a busy loop) must not date them late too.
	 */
	private beginArrivals(signalAt: number | undefined): void {
		const now = this.clock.now();
		this.arrivals.begin(signalAt === undefined ? now : now - Math.max(0, Date.now() - signalAt));
	}

	private sortLongLived(): void {
		for (const filter of this.filters) {
			filter.sortLongLived();
		}
	}

	/**
	 * The end of the reject phase (a reload: of the linger): long-lived
	 * connections still open are closed (long-lived.ts), and what has not
	 * finished closing `UPGRADE_CLOSE_WAIT_MS` later is cut, destroyed and
	 * counted in one step (apart, the first socket's 'close' could read the
	 * count before the others were in it).
	 */
	private closeLongLived(): void {
		this.closedLongLived += closeLongLivedOf(this.filters, this.notices.reason ?? 'shutdown', this.logger);
		this.longLivedClose = 'waiting';
		this.timers.timeout(() => {
			this.longLivedClose = 'over';
			this.longLivedCut += cutLongLivedOf(this.filters, this.logger);
			this.closeIfIdle();
		}, UPGRADE_CLOSE_WAIT_MS);
	}

	/**
	 * The long-lived connections closed have finished closing (a close frame
	 * queued behind the app's data went out and was answered; an event stream's
	 * end was written), or were cut: until then nothing may cut them mid-frame.
	 */
	private longLivedSettled(): boolean {
		const {upgrades, streams} = this.counts;
		if (upgrades + streams === 0) {
			return true;
		}

		if (this.longLivedClose !== 'over') {
			return false;
		}

		// Sorted out since the cut (a response that became an event stream late): cut as well.
		this.longLivedCut += cutLongLivedOf(this.filters, this.logger);
		return true;
	}

	/** Counts to the host (progress.ts), then every REPORT_INTERVAL_MS. */
	private startReporting(): void {
		this.progress.report(this.host);
		this.timers.interval(() => {
			this.sortLongLived();
			this.progress.report(this.host);
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

		if (stops) {
			this.host?.stoppedAccepting?.();
		}

		switch (phase.name) {
			case 'reject': {
				this.logger.info({inflight: this.inflight}, 'rejecting new requests');
				break;
			}

			case 'closing': {
				this.progress.summariseRejections();
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
				this.host?.finish(this.summary(), this.appEnded === 'idle' ? 'own' : 'now');
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
		if (leaving && this.inflight === 0 && this.longLivedSettled() && this.clock.now() >= this.settleUntil) {
			// What is still connected has no request in flight (idle, a last
			// response on its way to a slow client, a slowloris): each is closed
			// gracefully, within a bound, before the app's shutdown, which may exit.
			if (!this.connectionsClosed) {
				this.connectionsClosed = true;
				for (const filter of this.filters) {
					filter.closeConnections();
				}
			}

			if (this.filters.some(filter => filter.closingConnections > 0)) {
				return;
			}

			this.enter({name: 'hooks', startedAt: this.clock.now()});
		}
	}

	/** The longest a connection the drain closes may linger now (filter.ts LINGER_MAX_MS), leaving half the time to the deadline for the app's shutdown. */
	private readonly lingerMs = (): number => (this.deadlineAt === undefined ? LINGER_MAX_MS : Math.max(0, Math.min(LINGER_MAX_MS, (this.deadlineAt - this.clock.now()) / 2)));

	private startHooks(): void {
		const hooks = namedHooks(this.hooks);
		const reason = this.notices.reason ?? 'shutdown';
		const app = this.app?.has(this.signal, reason) ? this.app : undefined;
		if (hooks.length === 0 && !app) {
			this.enter({name: 'done'});
			return;
		}

		// Every request is done: nothing to report any more, and a timer of ours
		// must not keep the process alive while the app's shutdown finishes.
		this.timers.clearAll();
		const onFailure = async (name: string): Promise<void> => {
			this.hooksFailed++;
			await this.host?.hookFailed?.(name);
		};

		const run = async (): Promise<void> => {
			if (hooks.length > 0) {
				await runHooks(hooks, {logger: this.logger, clock: this.clock, deadlineAt: this.deadlineAt, onFailure});
			}

			if (app) {
				this.appEnded = await app.run(this.signal, reason, onFailure);
			}

			this.enter({name: 'done'});
		};

		if (this.host) {
			this.host.hooksStarting(copyCounts(this.counts), () => {
				void run();
			});
		} else {
			void run();
		}
	}

}
