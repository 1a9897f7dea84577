/**
 * The cluster's arrival telemetry during a drain, summed from the workers'
 * own counts (worker/arrivals.ts), and the adaptive reject period's rule
 * (`--adaptive-reject on`). It ends the reject phase, never later than
 * `--reject-period`, at the first moment that
 *   - is at least ADAPTIVE_FLOOR_MS after the reject phase began,
 *   - every peer that sent app requests in the 60 s before the signal, or
 *     since, has been silent for its own quiet window (`peerQuietMs`),
 *   - and no app request at all arrived in the last QUIET_ALL_MS,
 * on figures every worker gave when asked at that moment (`report-now`). A
 * worker whose heartbeat is late or says its loop was blocked (a backlog not
 * yet counted) may be hiding arrivals: the rule waits for it.
 */
import {OTHER_PEERS, type ArrivalsReport, type PeerArrivals} from '../arrivals-report.js';
import type {Logger} from '../logger.js';
import type {Timeline} from '../timeline.js';


/** The reject phase lasts at least this long, adaptive or not. */
export const ADAPTIVE_FLOOR_MS = 2000;
/** No app request at all in this long before the end. */
export const QUIET_ALL_MS = 1000;
/** The shortest quiet window of a peer. */
export const MIN_QUIET_MS = 1000;
/**
 * ln(100 000): a steady peer is silent this many mean gaps once in 100 000
 * gaps. A peer sends hundreds of gaps during a reject phase: at ln(1000) a
 * slow one ended it early in about one termination of 25 (issue 41).
 */
export const QUIET_GAPS = Math.log(100_000);
/** A peer whose rate since the signal is this many times lower than before tapers (one address before many senders). */
export const TAPER_RATIO = 2;
/** A peer's window covers its longest lull before the signal times this. */
export const GAP_MARGIN = 1.5;
/** How long a pod must have counted, before and after the signal, for a peer of one request a second to have shown (e^-10). */
export const YOUNG_LOOK_MS = 10_000;
/** How old a worker's figures may be (its reports come at most four times a second, plus the IPC's delay). */
export const REPORT_LAG_MS = 500;
/** A worker that has not reported for this long may be hiding arrivals. */
export const STALE_REPORT_MS = 1500;

/** One peer summed over the workers: its rates added, its longest lull the shortest of the workers' (each bounds it). */
export type PeerFigures = PeerArrivals;

/** The cluster's figures: what `drain finished` and /status show. */
export interface ArrivalFigures {
	readonly total: number;
	readonly bySecond: number[];
	readonly lastMs: number | null;
	readonly lastFrom: string | null;
	readonly peers: PeerFigures[];
	/** The longest any worker could count before the signal (up to 60 s). */
	readonly observedMs?: number;
}

type MutablePeer = {-readonly [K in keyof PeerFigures]: PeerFigures[K]};

/** Sums the workers' reports (undefined: a worker that has not reported arrivals). */
export function mergeArrivals(reports: Iterable<ArrivalsReport | undefined>): ArrivalFigures {
	let total = 0;
	const bySecond: number[] = [];
	let last: {ms: number; from: string | null} | undefined;
	let observedMs: number | undefined;
	const peers = new Map<string, MutablePeer>();
	/** Peers some worker saw before the signal with no lull: the cluster's longest is shorter still. */
	const steady = new Set<string>();
	for (const report of reports) {
		if (report === undefined) {
			continue;
		}

		total += report.total;
		if (report.observedMs !== undefined) {
			observedMs = Math.max(report.observedMs, observedMs ?? 0);
		}

		for (const [second, count] of report.bySecond.entries()) {
			bySecond[second] = (bySecond[second] ?? 0) + count;
		}

		if (report.lastMs !== null && (last === undefined || report.lastMs > last.ms)) {
			last = {ms: report.lastMs, from: report.lastFrom};
		}

		for (const {peer, ratePerSecond, count, lastMs, longestGapMs, recentPerSecond} of report.peers) {
			const known = peers.get(peer) ?? {peer, ratePerSecond: 0, count: 0, lastMs: null};
			known.ratePerSecond += ratePerSecond;
			known.count += count;
			known.lastMs = lastMs === null ? known.lastMs : Math.max(lastMs, known.lastMs ?? 0);
			// A silence of the peer's is one in every worker it reaches: each worker's
			// longest bounds the cluster's, and one that saw none says there was none.
			if (longestGapMs !== undefined) {
				known.longestGapMs = Math.min(longestGapMs, known.longestGapMs ?? Number.POSITIVE_INFINITY);
			} else if (ratePerSecond > 0) {
				steady.add(peer);
			}

			if (recentPerSecond !== undefined) {
				known.recentPerSecond = (known.recentPerSecond ?? 0) + recentPerSecond;
			}

			peers.set(peer, known);
		}
	}

	for (let second = 0; second < bySecond.length; second++) {
		bySecond[second] ??= 0;
	}

	for (const peer of steady) {
		delete peers.get(peer)!.longestGapMs;
	}

	return {
		total,
		bySecond,
		lastMs: last?.ms ?? null,
		lastFrom: last?.from ?? null,
		peers: [...peers.values()].sort((a, b) => b.ratePerSecond - a.ratePerSecond),
		...(observedMs === undefined ? {} : {observedMs}),
	};
}

/** A peer's quiet window for a steady rate: QUIET_GAPS / λ, at least MIN_QUIET_MS; λ = 0 has none (it sent nothing). */
export function quietWindowMs(ratePerSecond: number): number {
	return ratePerSecond <= 0 ? 0 : Math.max(MIN_QUIET_MS, (QUIET_GAPS / ratePerSecond) * 1000);
}

/**
 * A peer's quiet window: the steady rule's, on its rate since the signal where
 * that is lower than before it, widened by the fall itself when it tapers; and
 * never shorter than its own longest lull before the signal, with a margin.
 */
export function peerQuietMs({ratePerSecond, count, longestGapMs, recentPerSecond}: PeerFigures, sinceSignalMs: number): number {
	// A peer new since the signal: its rate since then.
	const before = ratePerSecond > 0 ? ratePerSecond : count / Math.max(1, sinceSignalMs / 1000);
	const now = recentPerSecond === undefined ? before : Math.min(before, recentPerSecond);
	const fall = ratePerSecond > 0 && recentPerSecond !== undefined ? ratePerSecond / Math.max(recentPerSecond, Number.MIN_VALUE) : 1;
	const steady = quietWindowMs(now) * (fall >= TAPER_RATIO ? fall : 1);
	return Math.round(Math.max(steady, (longestGapMs ?? 0) * GAP_MARGIN));
}

export interface AdaptiveInput {
	readonly figures: ArrivalFigures;
	/** Milliseconds since the signal. */
	readonly nowMs: number;
	/** When the reject phase began, in ms since the signal (its period's end is the caller's cap). */
	readonly rejectStartMs: number;
	/** Workers whose figures may be stale or missing: the rule waits. */
	readonly staleWorkers: number;
	/** Every worker answered a request sent at this moment: the figures are complete up to it. */
	readonly freshUntilMs?: number | undefined;
}

/** A peer the rule waits for: how long it must stay silent, how long it has been. */
export interface QuietPeer {
	readonly peer: string;
	readonly quietMs: number;
	readonly silentMs: number;
}

export type AdaptiveDecision =
	| {readonly end: true; readonly peers: QuietPeer[]}
	| {readonly end: false; readonly why: 'floor' | 'young' | 'recent-arrival' | 'stale-report' | 'too-many-peers' | 'peer'; readonly peers: QuietPeer[]};

export function decide({figures, nowMs, rejectStartMs, staleWorkers, freshUntilMs}: AdaptiveInput): AdaptiveDecision {
	// Reports are up to REPORT_LAG_MS old: what they show as silent is silent up
	// to then only. Fresh figures, every worker's answer, up to their request.
	const knownUntil = freshUntilMs ?? nowMs - REPORT_LAG_MS;
	const peers: QuietPeer[] = figures.peers.map(peer => ({peer: peer.peer, quietMs: peerQuietMs(peer, nowMs), silentMs: Math.max(0, Math.round(knownUntil - (peer.lastMs ?? 0)))}));
	if (nowMs - rejectStartMs < ADAPTIVE_FLOOR_MS) {
		return {end: false, why: 'floor', peers};
	}

	// A pod that has just started may not have seen a slow peer yet (a 1 req/s
	// one unseen in its first 3 s lost requests in 1 of 50 terminations,
	// bench/adaptive-shapes.js --only young).
	if (figures.observedMs !== undefined && figures.observedMs + nowMs < YOUNG_LOOK_MS) {
		return {end: false, why: 'young', peers};
	}

	if (staleWorkers > 0) {
		return {end: false, why: 'stale-report', peers};
	}

	if (figures.lastMs !== null && knownUntil - figures.lastMs < QUIET_ALL_MS) {
		return {end: false, why: 'recent-arrival', peers};
	}

	// Too many peers to tell apart (worker/arrivals.ts MAX_PEERS): a pooled rate
	// says nothing of each one's gaps. The full period.
	if (peers.some(peer => peer.peer === OTHER_PEERS)) {
		return {end: false, why: 'too-many-peers', peers};
	}

	if (peers.some(peer => peer.silentMs < peer.quietMs)) {
		return {end: false, why: 'peer', peers};
	}

	return {end: true, peers};
}

/** How the reject phase ended: at its period's end, or early by the adaptive rule. */
export type RejectEnd =
	| {readonly by: 'period'; readonly atMs: number}
	| {readonly by: 'adaptive'; readonly atMs: number; readonly peers: readonly QuietPeer[]};

export interface ArrivalSummaryInput {
	readonly figures: ArrivalFigures;
	/** Undefined: the drain was over before its reject phase would have ended (nothing was left to refuse for). */
	readonly end: RejectEnd | undefined;
	readonly timeline: Timeline;
	/** Some worker with a drained server reported its arrivals. */
	readonly reported: boolean;
	/** Workers whose arrivals are missing (dead, or nothing drained). */
	readonly uncounted: number;
	readonly logger: Logger;
}

/** `drain finished`'s arrival figures, and what the operator should make of them (`advice`). */
export function arrivalSummary({figures, end, timeline, reported, uncounted, logger}: ArrivalSummaryInput): Record<string, unknown> {
	let advice: string;
	const ended = {rejectEnd: end?.by ?? null, rejectEndedMs: end?.atMs ?? null};
	if (!reported) {
		// Unknown, not none: a worker with no server to drain counts nothing.
		return {
			lastArrivalMs: null,
			lastArrivalFrom: null,
			arrivals: null,
			arrivalsBySecond: null,
			...ended,
			...(uncounted > 0 ? {arrivalsUncounted: uncounted} : {}),
			advice: 'no arrival figures: no worker reported any (a worker with no server to drain counts nothing)',
		};
	}

	if (figures.lastMs === null) {
		advice = 'no app request arrived after the signal: the load balancer had stopped already (a preStop hook, or readiness)';
	} else if (end === undefined) {
		advice = `the last app request came ${(figures.lastMs / 1000).toFixed(1)} s after the signal; the drain was over before its reject phase would have ended`;
	} else if (figures.lastMs > end.atMs) {
		// Only a connection still open can bring one then (a keep-alive client,
		// a request pipelined behind a slow response): answered 503 and closed.
		advice = `app requests still arrived after the reject phase ended, the last ${((figures.lastMs - end.atMs) / 1000).toFixed(1)} s after it${end.by === 'adaptive' ? ' (adaptive)' : ''}, on connections still open (answered 503): if the load balancer sent them, raise --reject-period`;
		logger.warn({lastArrivalMs: figures.lastMs, lastArrivalFrom: figures.lastFrom, rejectEndedMs: end.atMs}, 'app requests still arrived after the reject phase ended, on connections still open: if the load balancer sent them, it needed longer; raise --reject-period');
	} else if (end.by === 'period' && figures.lastMs >= end.atMs - 1000) {
		advice = 'raise --reject-period: app requests still arrived in its last second';
		logger.warn({lastArrivalMs: figures.lastMs, lastArrivalFrom: figures.lastFrom, rejectPeriodMs: timeline.rejectPeriodMs}, 'app requests still arrived in the last second of the reject period: the load balancer needed longer; raise --reject-period');
	} else if (end.by === 'adaptive') {
		// Once the workers stopped listening, a request is refused before anything
		// can count it: the last one seen is not when the load balancer stopped.
		advice = `the reject phase ended early (adaptive) ${((end.atMs - figures.lastMs) / 1000).toFixed(1)} s after the last app request seen, ${(figures.lastMs / 1000).toFixed(1)} s after the signal; requests after the end, if any, were refused unseen, so when the load balancer stopped is not known: to size --reject-period, measure a drain with --adaptive-reject off`;
	} else {
		advice = `the load balancer stopped sending ${(figures.lastMs / 1000).toFixed(1)} s after the signal; the reject phase ended ${((end.atMs - figures.lastMs) / 1000).toFixed(1)} s after that`;
	}

	return {
		lastArrivalMs: figures.lastMs,
		lastArrivalFrom: figures.lastFrom,
		arrivals: figures.total,
		// Every second up to the reject phase's end, the quiet ones too, or
		// to the last arrival's if later (a request pipelined behind a slow
		// response, refused in the closing phase): they add up to `arrivals`.
		arrivalsBySecond: Array.from({length: Math.max(Math.ceil((end?.atMs ?? 0) / 1000), Math.floor((figures.lastMs ?? 0) / 1000) + 1)}, (_, second) => figures.bySecond[second] ?? 0),
		...ended,
		...(uncounted > 0 ? {arrivalsUncounted: uncounted} : {}),
		advice,
	};
}
