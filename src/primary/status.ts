/**
 * The cluster as `GET /status` shows it, and the numbers `/metrics` reads: the
 * state and timeline of the primary, one entry per worker. Pure reads of the
 * primary's view (`ClusterView`, which index.ts hands out): no prom-client, no I/O.
 */
import type {Clock} from '../clock.js';
import {TIMELINE_PHASES, type TimelinePhase} from '../timeline.js';
import type {ClusterDrain} from './drain.js';
import type {Fleet} from './fleet.js';
import type {PrimaryOptions} from './options.js';
import type {ReloadResult} from './reload.js';
import {inflightOf, isAttached, lastLive, roleOf, type WorkerRecord} from './worker-record.js';

/** The primary's state (index.ts `PrimaryState`) by name, as `/status` shows it. */
export type ClusterState = 'running' | 'reloading' | 'draining' | 'stopping';

/** What the metrics and status room reads of the cluster (index.ts `Primary.view`). */
export interface ClusterView {
	readonly state: ClusterState;
	/** The drain, from its signal on (also once finished, while the primary stops). */
	readonly drain: ClusterDrain | undefined;
	readonly reloads: Readonly<Record<ReloadResult['kind'], number>>;
	readonly options: PrimaryOptions;
	readonly fleet: Fleet;
	readonly clock: Clock;
	/** `clock.now()` when the primary was constructed. */
	readonly startedAt: number;
}

/** Where the cluster stands on the drain's timeline (timeline.ts): the drain says, from its signal on. */
export function drainPhase(view: ClusterView): TimelinePhase {
	if (view.state === 'running' || view.state === 'reloading') {
		return 'serving';
	}

	return view.state === 'draining' ? view.drain?.timelinePhase ?? 'stopping' : 'stopping';
}

export interface WorkerStatus {
	readonly slot: number;
	readonly id: number;
	readonly pid: number;
	readonly state: string;
	readonly role: string;
	readonly attached: boolean;
	/** Null for a worker that does not warm up. */
	readonly warmup: {readonly state: 'warming'; readonly failingChecks: readonly string[]} | {readonly state: 'ready'} | null;
	readonly startReason: string;
	readonly uptimeSeconds: number;
	/** Starts of its slot after the first: crashes, recycles and reloads. */
	readonly restarts: number;
	readonly inflight: number;
	readonly connections: {readonly upgrades: number; readonly streams: number};
	/** From its last heartbeat; null before the first. */
	readonly rssBytes: number | null;
	readonly heapUsedBytes: number | null;
	readonly eventLoopDelayMs: number | null;
	readonly heartbeatAgeMs: number | null;
	readonly requests: number | null;
	/** Connections it closed for their age (`--max-connection-age`). */
	readonly connectionsAged: number | null;
	/** `--max-event-loop-delay`: shedding new requests as of its last heartbeat; null when off or before the first. */
	readonly shedding: boolean | null;
	/** `--max-event-loop-delay`: requests it answered 503 by shedding since it started; null when off. */
	readonly shed: number | null;
}

export function workerStatus(record: WorkerRecord, view: ClusterView, restarts: number): WorkerStatus {
	const now = view.clock.now();
	const {health, report} = record;
	return {
		slot: record.slot,
		id: record.id,
		pid: record.pid,
		state: record.state.name === 'gone' ? lastLive(record.state).name : record.state.name,
		role: roleOf(record.state),
		attached: isAttached(record.state),
		warmup: warmupStatus(record),
		startReason: record.startReason,
		uptimeSeconds: round((now - record.startedAt) / 1000),
		restarts,
		inflight: inflightOf(record),
		connections: {upgrades: report?.upgrades ?? 0, streams: report?.streams ?? 0},
		rssBytes: health?.rssBytes ?? null,
		heapUsedBytes: health?.heapUsedBytes ?? null,
		eventLoopDelayMs: health?.loopDelayMs ?? null,
		heartbeatAgeMs: health ? Math.round(now - health.at) : null,
		// Requests since it started, from its heartbeat (a drain report counts only the drain's).
		requests: health?.requests ?? null,
		connectionsAged: health?.connectionsAged ?? null,
		shedding: health?.shedding ?? null,
		shed: health?.shed ?? null,
	};
}

function warmupStatus({warmup}: WorkerRecord): WorkerStatus['warmup'] {
	switch (warmup.name) {
		case 'none': {
			return null;
		}

		case 'warming': {
			return {state: 'warming', failingChecks: warmup.failures};
		}

		case 'ready': {
			return {state: 'ready'};
		}

		default: {
			const never: never = warmup;
			throw new Error(`unknown warm-up ${String(never)}`);
		}
	}
}

/** The drain's arrival figures (primary/arrivals.ts), as `drain finished` names them. */
function arrivalStatus(drain: NonNullable<ClusterView['drain']>): Record<string, unknown> {
	const {lastMs, lastFrom, total, bySecond, peers} = drain.arrivals;
	const end = drain.rejectEnded;
	return {
		lastArrivalMs: lastMs,
		lastArrivalFrom: lastFrom,
		arrivals: total,
		arrivalsBySecond: bySecond,
		arrivalPeers: peers,
		rejectEnd: end?.by ?? null,
		rejectEndedMs: end?.atMs ?? null,
	};
}

const round = (n: number): number => Math.round(n * 1000) / 1000;

export function clusterStatus(view: ClusterView, restartsOf: (slot: number) => number): Record<string, unknown> {
	const {clock, drain, options} = view;
	const now = clock.now();
	const wall = (at: number): string => new Date(Date.now() - (now - at)).toISOString();
	const phase = drainPhase(view);
	return {
		state: view.state,
		phase,
		drainPhase: TIMELINE_PHASES.indexOf(phase),
		pid: process.pid,
		uptimeSeconds: round((now - view.startedAt) / 1000),
		workersDesired: options.workers,
		timeline: {
			servePeriodMs: options.settings.servePeriodMs,
			rejectPeriodMs: options.settings.rejectPeriodMs,
			gracePeriodMs: options.settings.gracePeriodMs,
		},
		drain: drain
			? {
				signal: drain.signal,
				startedAt: wall(drain.startedAt),
				elapsedMs: Math.round(now - drain.startedAt),
				serveUntil: wall(drain.startedAt + drain.timeline.servePeriodMs),
				rejectUntil: wall(drain.startedAt + drain.rejectEndMs),
				deadline: wall(drain.startedAt + drain.timeline.gracePeriodMs),
				forcedBy: drain.forcedBy ?? null,
				durationMs: drain.durationMs ?? null,
				...arrivalStatus(drain),
			}
			: null,
		reloads: view.reloads,
		workers: view.fleet.alive
			.sort((a, b) => a.slot - b.slot || a.id - b.id)
			.map(record => workerStatus(record, view, restartsOf(record.slot))),
	};
}
