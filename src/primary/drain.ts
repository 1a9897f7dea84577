/**
 * The cluster's drain, from the signal to the exit code, as one `DrainState`:
 *
 *   signal ──▶ draining ──every worker gone──────────────────────────────▶ finished (0, or 5 if one was lost)
 *                 │ ──deadline──────▶ killing (by deadline) ──gone/net────▶ finished (3)
 *                 │ ──second signal─▶ killing (by second-signal) ─────────▶ finished (4)
 *
 * It arms the deadline first, tells every worker, disconnects the workers with
 * nothing to drain when the reject phase ends (basic-drain.ts), and settles the
 * exit code (outcome.ts).
 */
import {TimerGroup, type Clock} from '../clock.js';
import {sumOpen} from '../counts.js';
import {figures, logDrainFinished} from '../drain-finished.js';
import {ExitCode} from '../exit-codes.js';
import type {Logger} from '../logger.js';
import type {DrainMessage, InflightMessage} from '../protocol.js';
import {isDuplicateSignal, phaseAt, rejectEndsAt, remaining, type Timeline, type TimelinePhase} from '../timeline.js';
import type {Fleet} from './fleet.js';
import {ADAPTIVE_CHECK_MS, AdaptiveReject} from './adaptive-reject.js';
import {ADAPTIVE_FLOOR_MS, arrivalSummary, mergeArrivals, type AdaptiveDecision, type ArrivalFigures, type RejectEnd} from './arrivals.js';
import {CountsSinceSignal} from './drain-counts.js';
import {leftCleanly, outcome, type ForcedBy} from './outcome.js';
import {BasicDrain} from './basic-drain.js';
import {inflightOf, isAttached, killReason, knownInflight, placeOf, uncovered, type WorkerRecord} from './worker-record.js';

/** The primary's words for the drain (the worker's and /status': timeline.ts). */
export type DrainState =
	/** Every worker was told; waiting for them to be gone. */
	| {readonly name: 'draining'}
	/** The workers left were sent SIGKILL; waiting for them to be gone, or `KILL_WAIT_MS`. */
	| {readonly name: 'killing'; readonly by: ForcedBy}
	/** Over: the exit code is settled. `forcedBy` stays for /status. */
	| {readonly name: 'finished'; readonly code: ExitCode; readonly durationMs: number; readonly forcedBy: ForcedBy | undefined};

const PROGRESS_INTERVAL_MS = 1000;
/** `drain progress` repeats unchanged counts at most this often (an idle reject phase is quiet). */
const PROGRESS_REPEAT_MS = 5000;
/** After SIGKILL, how long to wait for the workers to be gone before finishing anyway. */
export const KILL_WAIT_MS = 2000;

export interface ClusterDrainOptions {
	readonly fleet: Fleet;
	readonly timeline: Timeline;
	readonly clock: Clock;
	readonly logger: Logger;
	/** Called once, with the exit code, when every worker is gone or we stopped waiting. */
	readonly onFinished: (code: ExitCode) => void;
	readonly adaptiveReject?: boolean;
	/** `--listen-timeout`, for the basic drain (basic-drain.ts). */
	readonly listenTimeoutMs?: number;
}

/** It had a drained server listening: its requests, at least, were counted. */
const counted = (record: WorkerRecord): boolean => record.covered.size > 0;


export type {RejectEnd} from './arrivals.js';
export type {ForcedBy} from './outcome.js';

export class ClusterDrain {
	readonly startedAt: number;
	/** The workers alive when the signal came: the ones this drain answers for. */
	readonly workers: readonly WorkerRecord[];
	private readonly counts: CountsSinceSignal;
	private lifecycle: DrainState = {name: 'draining'};
	private lastProgress: {readonly key: string; readonly at: number} | undefined;
	private readonly timers: TimerGroup;
	private rejectEnd: RejectEnd | undefined;
	/** When `start()`'s own work was done: a signal handled right after it came during it. */
	private startWorkDoneAt: number | undefined;
	private readonly adaptive: AdaptiveReject;
	private readonly basic: BasicDrain;

	/** Connections node:cluster stranded during the drain, which the primary answered itself. */
	private stranded = 0;

	private readonly signalAt = Date.now();

	constructor(private readonly options: ClusterDrainOptions, readonly signal: NodeJS.Signals) {
		this.timers = new TimerGroup(options.clock);
		this.startedAt = options.clock.now();
		this.workers = options.fleet.alive;
		this.counts = new CountsSinceSignal(this.workers);
		this.basic = new BasicDrain({...options, timers: this.timers});
		this.adaptive = new AdaptiveReject({
			fleet: options.fleet,
			clock: options.clock,
			timeline: options.timeline,
			startedAt: this.startedAt,
			arrivals: () => this.arrivals,
			active: nowMs => this.rejectEnd === undefined && this.lifecycle.name === 'draining' && nowMs < rejectEndsAt(options.timeline),
			onEnd: this.endRejectEarly,
		});
	}

	start(): void {
		const {fleet, logger, timeline} = this.options;
		const {signal} = this;
		// The deadline first: whatever happens next, it is already set.
		this.timers.timeout(() => {
			logger.error({gracePeriodMs: timeline.gracePeriodMs}, 'grace period over; killing the workers left');
			this.killAll('deadline');
		}, timeline.gracePeriodMs);
		logger.info({signal, ...timeline, workers: this.workers.length}, 'drain started');
		for (const record of this.workers) {
			fleet.send(record, this.message());
		}

		this.basic.disconnectServerless();

		this.timers.timeout(() => {
			this.rejectEnd ??= {by: 'period', atMs: rejectEndsAt(timeline)};
			this.basic.disconnectAll();
		}, rejectEndsAt(timeline));
		if (this.options.adaptiveReject && timeline.rejectPeriodMs > ADAPTIVE_FLOOR_MS) {
			this.timers.timeout(() => {
				this.timers.interval(this.adaptive.check, ADAPTIVE_CHECK_MS);
			}, timeline.servePeriodMs + ADAPTIVE_FLOOR_MS);
		}

		this.timers.interval(() => {
			this.logProgress();
		}, PROGRESS_INTERVAL_MS);
		fleet.on('gone', this.check);
		fleet.on('message', this.onMessage);
		fleet.on('listening', this.basic.onListening);
		this.startWorkDoneAt = this.options.clock.now();
		this.check();
	}

	get arrivals(): ArrivalFigures {
		return mergeArrivals(this.workers.map(record => record.report?.arrivals));
	}

	onStranded(): void {
		this.stranded++;
	}

	get rejectEnded(): RejectEnd | undefined {
		return this.rejectEnd;
	}

	/** In ms after the signal: an adaptive end once it came, else the period's. */
	get rejectEndMs(): number {
		return this.rejectEnd?.atMs ?? rejectEndsAt(this.options.timeline);
	}

	/** Where the drain stands on its timeline now: what /status and the metrics show. */
	get timelinePhase(): TimelinePhase {
		return this.lifecycle.name === 'draining' ? phaseAt(this.options.timeline, this.options.clock.now() - this.startedAt, this.rejectEndMs) : 'stopping';
	}

	message(): DrainMessage {
		return {type: 'drain', ...remaining(this.options.timeline, this.options.clock.now() - this.startedAt), signal: this.signal, signalAt: this.signalAt};
	}

	get timeline(): Timeline {
		return this.options.timeline;
	}

	get state(): DrainState {
		return this.lifecycle;
	}

	get forcedBy(): ForcedBy | undefined {
		const state = this.lifecycle;
		switch (state.name) {
			case 'draining': {
				return undefined;
			}

			case 'killing': {
				return state.by;
			}

			case 'finished': {
				return state.forcedBy;
			}

			default: {
				const never: never = state;
				throw new Error(`unknown drain state ${String(never)}`);
			}
		}
	}

	get durationMs(): number | undefined {
		return this.lifecycle.name === 'finished' ? this.lifecycle.durationMs : undefined;
	}

	/** Another stop signal: the same one delivered twice, or the user insisting. */
	onSignal(signal: NodeJS.Signals): void {
		if (this.lifecycle.name !== 'draining') {
			return;
		}

		// A copy that arrived while the first one was being handled waits for that
		// work (tens of ms on a loaded machine): the window counts from its end too.
		const now = this.options.clock.now();
		if (isDuplicateSignal(this.startedAt, now) || isDuplicateSignal(this.startWorkDoneAt ?? this.startedAt, now)) {
			this.options.logger.info({signal}, 'repeated signal right after the first; ignoring it');
			return;
		}

		this.options.logger.warn({signal}, 'second signal during the drain; killing the workers now');
		this.killAll('second-signal');
	}

	/** The adaptive rule, confirmed (adaptive-reject.ts), ends the reject phase now, as at the period's end. */
	private readonly endRejectEarly = (decision: Extract<AdaptiveDecision, {end: true}>, nowMs: number): void => {
		const {fleet, logger, timeline} = this.options;
		const atMs = Math.round(nowMs);
		this.rejectEnd = {by: 'adaptive', atMs, peers: decision.peers};
		const {lastMs, lastFrom, total} = this.arrivals;
		logger.info({
			afterMs: atMs,
			rejectPeriodMs: timeline.rejectPeriodMs,
			savedMs: Math.round(rejectEndsAt(timeline) - nowMs),
			lastArrivalMs: lastMs,
			lastArrivalFrom: lastFrom,
			arrivals: total,
			peers: decision.peers.map(({peer, quietMs, silentMs}) => ({peer, quietMs, silentMs})),
		}, 'reject phase ended early: the load balancers have stopped sending');
		for (const record of fleet.alive) {
			fleet.send(record, {type: 'end-reject'});
		}

		this.basic.disconnectAll();
	};

	private readonly onMessage = (record: WorkerRecord, message: {type: string}): void => {
		// A worker forked just before the signal may have missed the broadcast
		// (its channel was not open yet): its `attached` comes after, and gets the
		// drain again, the time spent taken off. A second one is ignored.
		if (message.type === 'attached') {
			this.options.fleet.send(record, this.message());
		}

		if (message.type === 'inflight') {
			this.counts.onReport(record, message as InflightMessage);
			this.adaptive.onReport((message as InflightMessage).reportId);
		}
	};

	private logProgress(): void {
		const workers: Record<number, number | 'nothing drained' | 'no report'> = {};
		const alive = this.options.fleet.alive;
		for (const record of alive) {
			// A worker with nothing to drain never reports; one with a drained server
			// that has not reported yet may be frozen: the two must not look alike.
			workers[record.id] = record.report?.inflight ?? (isAttached(record.state) ? 'no report' : 'nothing drained');
		}

		// Long-lived connections apart: they never hold the drain.
		const {inflight, upgrades, streams} = sumOpen(alive.map(record => record.report));
		const key = JSON.stringify([workers, upgrades, streams]);
		const now = this.options.clock.now();
		if (this.lastProgress && this.lastProgress.key === key && now - this.lastProgress.at < PROGRESS_REPEAT_MS) {
			return;
		}

		this.lastProgress = {key, at: now};
		this.options.logger.info({inflight, upgrades, streams, workers}, 'drain progress');
	}

	private killAll(reason: ForcedBy): void {
		// The deadline can still come after a second signal: it kills again, but the first reason stays.
		if (this.lifecycle.name === 'draining') {
			this.lifecycle = {name: 'killing', by: reason};
		}

		for (const record of this.options.fleet.alive) {
			this.options.logger.warn({worker: record.id, workerPid: record.pid, inflight: knownInflight(record) ?? null, upgrades: record.report?.upgrades ?? null, streams: record.report?.streams ?? null, reason}, 'killing worker');
			this.options.fleet.kill(record, reason);
		}

		// The workers' 'gone' normally finishes the drain; this is the net under it.
		this.timers.timeout(() => {
			this.finish();
		}, KILL_WAIT_MS);
		this.check();
	}

	private readonly check = (): void => {
		if (this.options.fleet.alive.length === 0) {
			this.finish();
		}
	};

	private finish(): void {
		if (this.lifecycle.name === 'finished') {
			return;
		}

		const forcedBy = this.forcedBy;
		const lost = this.workers.filter(record => !leftCleanly(record));
		const {hooksFailed} = this.counts;
		const code = outcome(forcedBy, lost.length, hooksFailed);
		const durationMs = Math.round(this.options.clock.now() - this.startedAt);
		this.lifecycle = {name: 'finished', code, durationMs, forcedBy};
		this.timers.clearAll();
		this.options.fleet.off('gone', this.check);
		this.options.fleet.off('message', this.onMessage);
		this.options.fleet.off('listening', this.basic.onListening);
		// Where no worker counted any requests, the figures are not 0 but unknown.
		const uncounted = [...new Set(this.workers.flatMap(record => uncovered(record)))];
		const nothingCounted = uncounted.length > 0 && !this.workers.some(counted);
		// Requests cut short are known from the last counts, but not where nothing
		// counted them (a lost worker that never reported, an uncounted server).
		const cutKnown = uncounted.length === 0 && !lost.some(record => knownInflight(record) === undefined) && !this.workers.some(record => !isAttached(record.state) && placeOf(record.state).name === 'retiring');
		logDrainFinished(this.options.logger, {
			signal: this.signal,
			durationMs,
			figures: figures(field => this.counts.sum(field), !nothingCounted),
			hooksFailed,
			responsesCut: cutKnown ? lost.reduce((sum, record) => sum + inflightOf(record), 0) : null,
			exitCode: code,
			uncounted,
			more: {
				workersLost: lost.length,
				workersHung: this.workers.filter(record => killReason(record.state) === 'hung').length,
				// Accepted just as the last worker on their port closed it: answered by the primary (503, or closed).
				strandedConnections: this.stranded,
				...arrivalSummary({
					figures: this.arrivals,
					end: this.rejectEnd ?? (durationMs < rejectEndsAt(this.options.timeline) ? undefined : {by: 'period', atMs: rejectEndsAt(this.options.timeline)}),
					timeline: this.options.timeline,
					reported: this.workers.some(record => counted(record) && record.report?.arrivals !== undefined),
					// A worker that died during the drain took its last arrivals with it; one with nothing to drain never counted.
					uncounted: this.workers.filter(record => record.report?.arrivals === undefined || !leftCleanly(record)).length,
					logger: this.options.logger,
				}),
			},
			after: lost.length > 0 ? {lost: lost.map(record => ({worker: record.id, workerPid: record.pid, inflight: knownInflight(record) ?? null, killedFor: killReason(record.state) ?? null}))} : undefined,
		});
		this.options.onFinished(code);
	}
}
