/**
 * One process's drain: the phase machine that moves its drained servers through the
 * timeline after the signal, ending in the app's shutdown and an exit, which the host
 * makes (drain-host.ts).
 *
 *   serving -> serve -> reject -> closing -> hooks -> done
 *   serving -> retiring -> hooks -> done            (reload: a replacement is listening)
 */
import {inBackground, systemClock, TimerGroup, type Clock, type Timer} from '../clock.js';
import {copyCounts, tallyOf, type Counts} from '../counts.js';
import type {Logger} from '../logger.js';
import type {DrainSummary, NoticeCode} from '../protocol.js';
import type {WorkerSettings} from '../settings.js';
import {rejectEndsAt, type Timeline} from '../timeline.js';
import type {DrainHost} from './drain-host.js';
import {DrainedServers, StartWait} from './drained-servers.js';
import {LINGER_MAX_MS, Mode, type DrainableServer, type ServerFilter} from './filter.js';
import {modeFor, stopsAccepting, type Phase, type PhaseName} from './phase.js';
import type {AppShutdown} from './app-shutdown.js';
import type {ExitListeners} from './app-exit.js';
import {Shutdown, type ShutdownHook} from './hooks.js';
import {Arrivals} from './arrivals.js';
import {DrainNotices, LongLivedEnd, type DrainListener} from './long-lived.js';
import {DrainProgress, REPORT_INTERVAL_MS, SUMMARY_INTERVAL_MS} from './progress.js';
import {LoadShedding, type SheddingStats} from './shedding.js';

export type {DrainSummary} from '../protocol.js';
export type {DrainHost} from './drain-host.js';

export class ProcessDrain {
	private phase: Phase = {name: 'serving'};
	private readonly servers: DrainedServers;
	private readonly shutdown: Shutdown;
	private readonly notices: DrainNotices;
	private readonly longLived: LongLivedEnd;
	/** The signal that started the drain or reload: the app's listeners for it run. */
	private signal: NodeJS.Signals = 'SIGTERM';
	private readonly timers: TimerGroup;
	private startedAt = 0;
	/** Unknown in a retire. */
	private deadlineAt: number | undefined;
	private connectionsClosed = false;
	private readonly progress: DrainProgress;
	private host: DrainHost | undefined;
	readonly arrivals: Arrivals;
	private rejectTimer: Timer | undefined;
	/** A drain's signal that comes during a reload's retire finds `retired`, and once it did, `signalled`. */
	private leftForReload: 'no' | 'retired' | 'signalled' = 'no';
	private readonly start: StartWait;
	/** `--max-event-loop-delay`; undefined when off. */
	private readonly shedding: LoadShedding | undefined;
	/** The primary says every worker sheds: readiness answers 503 while this one sheds too. */
	everyWorkerSheds = false;

	constructor(settings: WorkerSettings, private readonly logger: Logger, private readonly clock: Clock = systemClock, {peerRates = true, exitListeners}: {peerRates?: boolean; exitListeners?: ExitListeners} = {}) {
		this.shutdown = new Shutdown(exitListeners);
		this.timers = new TimerGroup(clock);
		this.arrivals = new Arrivals(inBackground(clock), {perPeer: peerRates});
		this.notices = new DrainNotices(clock, logger);
		this.servers = new DrainedServers(settings, {
			logger,
			arrivals: this.arrivals,
			onNotice: this.notice,
			onIdle: () => {
				this.closeIfIdle();
			},
			lingerMs: this.lingerMs,
			covers: address => {
				this.host?.covers?.(address);
			},
			listened: () => {
				this.start.listened();
			},
			everyWorkerSheds: () => this.everyWorkerSheds,
		});
		this.shedding = settings.maxEventLoopDelayMs > 0
			? new LoadShedding(settings.maxEventLoopDelayMs, logger, clock, () => this.servers.shed, on => {
				// The mode alone: nothing the drain sorts or tracks (an HTTP/2 ledger stays lazy).
				for (const filter of this.servers.filters) {
					filter.setMode(on ? Mode.SHED : Mode.SERVING);
				}
			})
			: undefined;
		this.start = new StartWait(clock, (run, ms) => this.timers.timeout(run, ms), () => {
			this.closeIfIdle();
		});
		this.longLived = new LongLivedEnd(this.servers.filters, logger);
		this.progress = new DrainProgress(() => this.counts, logger, () => this.arrivals.changes);
	}

	get phaseName(): PhaseName {
		return this.phase.name;
	}

	get counts(): Counts {
		return {...this.servers.counts, closedLongLived: this.longLived.closed, longLivedCut: this.longLived.cut};
	}

	/** Read by the heartbeat every second: the one figure, not the whole sum. */
	get inflight(): number {
		let inflight = 0;
		for (const filter of this.servers.filters) {
			inflight += filter.inflight;
		}

		return inflight;
	}

	/** The `drained` message's and `drain finished`'s figures. */
	summary(): DrainSummary {
		return {durationMs: Math.round(this.clock.now() - this.startedAt), ...tallyOf(this.counts), hooksFailed: this.shutdown.failed};
	}

	setHost(host: DrainHost): void {
		this.host = host;
	}

	/** One sample of the event loop's lateness (the heartbeat's, every 100 ms): `--max-event-loop-delay`'s cue. */
	loopSample(lateMs: number): void {
		this.shedding?.sample(lateMs, this.phase.name === 'serving');
	}

	/** Undefined with `--max-event-loop-delay` off. */
	get sheddingStats(): SheddingStats | undefined {
		return this.shedding?.stats;
	}

	/** One taken during a drain (a second server, an app still starting) joins in the current phase. */
	addServer(server: DrainableServer): ServerFilter {
		const filter = this.servers.add(server);
		filter.setMode(this.phase.name === 'serving' && this.shedding?.active === true ? Mode.SHED : modeFor(this.phase.name));
		const stop = stopsAccepting(this.phase.name);
		if (stop !== 'no') {
			filter.stopAccepting(stop === 'keep-idle');
		}

		return filter;
	}

	/** The app is still starting (nothing listens yet) as the drain or retire begins. */
	settle(waitForListenMs: number): void {
		if (this.phase.name !== 'hooks' && this.phase.name !== 'done') {
			this.start.wait(waitForListenMs);
		}
	}

	/** Once per process: the primary says it once for the cluster. */
	private readonly noticed = new Set<NoticeCode>();
	private readonly notice = (code: NoticeCode): void => {
		if (!this.noticed.has(code)) {
			this.noticed.add(code);
			this.host?.notice?.(code);
		}
	};

	/** Why, for the log only; the probe's 503 names the check. */
	logFailedChecks(failures: readonly string[]): void {
		this.logger.warn({failures}, 'readiness checks failed');
	}

	/** Its requests still count in `requests`. */
	removeServer(filter: ServerFilter): void {
		this.servers.remove(filter);
	}

	get requests(): number {
		return this.servers.requests;
	}

	get connectionsAged(): number {
		return this.servers.connectionsAged;
	}

	addHook(hook: ShutdownHook): void {
		this.shutdown.add(hook);
	}

	addDrainListener(listener: DrainListener): void {
		this.notices.add(listener);
	}

	setAppShutdown(app: AppShutdown): void {
		this.shutdown.app = app;
	}

	/** `signalAt`: the primary's signal (epoch ms), the arrivals' zero. */
	begin(timeline: Timeline, signal: NodeJS.Signals = 'SIGTERM', signalAt?: number): void {
		if (this.phase.name !== 'serving') {
			return;
		}

		this.signal = signal;
		const now = this.clock.now();
		this.startedAt = now;
		this.deadlineAt = now + timeline.gracePeriodMs;
		this.beginArrivals(signalAt);
		this.servers.sortLongLived();
		const {inflight, upgrades, streams} = this.counts;
		this.logger.info({servePeriodMs: timeline.servePeriodMs, rejectPeriodMs: timeline.rejectPeriodMs, gracePeriodMs: timeline.gracePeriodMs, inflight, upgrades, streams}, 'drain started');

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

	/** The primary's adaptive reject period: the reject phase ends now; a serve phase runs its course. */
	endReject(): void {
		if (this.phase.name !== 'reject') {
			return;
		}

		this.timers.clear(this.rejectTimer);
		this.logger.info({afterMs: Math.round(this.clock.now() - this.startedAt)}, 'reject phase ended early: the load balancers stopped sending');
		this.enter({name: 'closing', startedAt: this.clock.now()});
	}

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

	/** Retiring goes on, bounded by the drain's deadline from now; the drain counts from this moment. */
	drainWhileRetiring(timeline: Timeline, signalAt?: number): void {
		if (this.leftForReload !== 'retired') {
			return;
		}

		this.leftForReload = 'signalled';
		this.deadlineAt = this.clock.now() + timeline.gracePeriodMs;
		this.beginArrivals(signalAt);
		const counts = copyCounts(this.counts);
		this.logger.info({...counts, gracePeriodMs: timeline.gracePeriodMs}, 'drain signal while retiring: retiring on, within the grace period; the drain counts from here');
		this.host?.signalledWhileRetiring?.(counts);
	}

	/** Exiting mid-drain (a crash, the app's exit): the counts since the last report go now (an IPC write is synchronous). */
	exiting(): void {
		if (this.phase.name !== 'serving' && this.phase.name !== 'done') {
			this.progress.report(this.host);
		}
	}

	/** A worker that read the message late must not date the arrivals late too. */
	private beginArrivals(signalAt: number | undefined): void {
		const now = this.clock.now();
		this.arrivals.begin(signalAt === undefined ? now : now - Math.max(0, Date.now() - signalAt));
	}

	private closeLongLived(): void {
		this.longLived.close(this.notices.reason ?? 'shutdown', (run, ms) => this.timers.timeout(run, ms), () => {
			this.closeIfIdle();
		});
	}

	private startReporting(): void {
		this.progress.report(this.host);
		this.timers.interval(() => {
			this.servers.sortLongLived();
			this.progress.report(this.host);
			// A response that became an event stream no longer counts as in flight.
			this.closeIfIdle();
		}, REPORT_INTERVAL_MS);
	}

	private enter(phase: Phase): void {
		this.phase = phase;
		// The drain's or retire's mode takes over from shedding.
		this.shedding?.end(phase.name === 'retiring' ? 'retire' : 'drain');
		// Listening stops once: `server.close()` again would emit the server's 'close' again.
		const stops = phase.name === 'retiring' || phase.name === 'closing';
		this.servers.enter(modeFor(phase.name), stops ? stopsAccepting(phase.name) : 'no');
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
				this.host?.finish(this.summary(), this.shutdown.ended === 'idle' ? 'own' : 'now');
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

	private closeIfIdle(): void {
		const {phase} = this;
		const leaving = phase.name === 'closing' || (phase.name === 'retiring' && !phase.lingering);
		if (leaving && this.inflight === 0 && this.longLived.settled(this.counts.upgrades + this.counts.streams) && this.start.over) {
			// What is still connected has no request in flight: each is closed gracefully,
			// within a bound, before the app's shutdown, which may exit.
			if (!this.connectionsClosed) {
				this.connectionsClosed = true;
				this.servers.closeConnections();
			}

			if (this.servers.closing) {
				return;
			}

			this.enter({name: 'hooks', startedAt: this.clock.now()});
		}
	}

	/** Leaves half the time to the deadline for the app's shutdown. */
	private readonly lingerMs = (): number => (this.deadlineAt === undefined ? LINGER_MAX_MS : Math.max(0, Math.min(LINGER_MAX_MS, (this.deadlineAt - this.clock.now()) / 2)));

	private startHooks(): void {
		const reason = this.notices.reason ?? 'shutdown';
		if (!this.shutdown.has(this.signal, reason)) {
			this.enter({name: 'done'});
			return;
		}

		// A timer of ours must not keep the process alive while the app's shutdown finishes.
		this.timers.clearAll();
		const run = async (): Promise<void> => {
			await this.shutdown.run(this.signal, reason, {logger: this.logger, clock: this.clock, deadlineAt: this.deadlineAt, onFailure: async name => this.host?.hookFailed?.(name)});
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
