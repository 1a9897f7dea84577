/**
 * A worker's arrival telemetry as it crosses the IPC channel: its shape and its
 * bounds. The worker counts it (worker/arrivals.ts), the primary merges the
 * workers' (primary/arrivals.ts).
 */
/** One peer's requests in a worker: its rate before the signal, its arrivals since. */
export interface PeerArrivals {
	/** The address its connections come from (`other`: the peers past the count kept one by one). */
	readonly peer: string;
	/** Its app requests per second over the 60 s before the signal (0: none, or a peer new since). */
	readonly ratePerSecond: number;
	readonly count: number;
	/** Milliseconds from the signal to its last one; null: none since. */
	readonly lastMs: number | null;
	/** Its longest silence in the 60 s before the signal, an upper bound from per-second counts; absent when it never missed a second. */
	readonly longestGapMs?: number;
	/** Its rate over its last requests since the signal (up to 5 s of them); absent when none came, and from an older helper. */
	readonly recentPerSecond?: number;
}

/** A worker's arrival telemetry since the signal; times in milliseconds from the moment it read the drain. */
export interface ArrivalsReport {
	readonly total: number;
	readonly bySecond: readonly number[];
	readonly lastMs: number | null;
	readonly lastFrom: string | null;
	readonly peers: readonly PeerArrivals[];
	/** How long before the signal it could count (up to the 60 s window): a peer slower than that may not have shown yet. Absent from an older helper. */
	readonly observedMs?: number;
}

/** How far back a peer's rate before the signal looks (worker/arrivals.ts). */
export const RATE_WINDOW_MS = 60_000;

/** The peer name of the requests past the peers a worker counts one by one (worker/arrivals.ts MAX_PEERS). */
export const OTHER_PEERS = 'other';

/** The most seconds, and peers, an `ArrivalsReport` may carry. */
export const MAX_ARRIVAL_SECONDS = 3600;
export const MAX_ARRIVAL_PEERS = 257;

const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const isTimeOrNull = (value: unknown): boolean => value === null || isCount(value);
const isRate = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value) && value >= 0;

function isPeerArrivals(value: unknown): value is PeerArrivals {
	if (typeof value !== 'object' || value === null) {
		return false;
	}

	const {peer, ratePerSecond, count, lastMs, longestGapMs, recentPerSecond} = value as Record<string, unknown>;
	return typeof peer === 'string' && peer.length <= 256 && isRate(ratePerSecond) && isCount(count) && isTimeOrNull(lastMs)
		&& (longestGapMs === undefined || isCount(longestGapMs)) && (recentPerSecond === undefined || isRate(recentPerSecond));
}

export function isArrivalsReport(value: unknown): value is ArrivalsReport {
	if (typeof value !== 'object' || value === null) {
		return false;
	}

	const {total, bySecond, lastMs, lastFrom, peers, observedMs} = value as Record<string, unknown>;
	return (observedMs === undefined || isCount(observedMs)) && isCount(total)
		&& Array.isArray(bySecond) && bySecond.length <= MAX_ARRIVAL_SECONDS && bySecond.every(isCount)
		&& isTimeOrNull(lastMs)
		&& (lastFrom === null || (typeof lastFrom === 'string' && lastFrom.length <= 256))
		&& Array.isArray(peers) && peers.length <= MAX_ARRIVAL_PEERS && peers.every(isPeerArrivals);
}
