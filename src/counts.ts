/**
 * What a drain counts, in one shape, from a worker's filters to `drain
 * finished`. A figure added here is carried, validated, summed and shown by
 * every side; only the filter that counts it is left to write.
 */

/** What is open now: it rises and falls. */
export interface Open {
	/** Requests (HTTP/2 streams) handed to the app whose response has not closed yet; long-lived ones apart. */
	readonly inflight: number;
	/** Upgraded connections (WebSockets) still open. Never in `inflight`. */
	readonly upgrades: number;
	/** Event-stream responses still open, once sorted out of `inflight` at drain time. */
	readonly streams: number;
}

/** What a drain (or a retire) counted since it began: it only grows. */
export interface Tally {
	/** Responses to app requests that completed during the drain. */
	readonly served: number;
	/** Responses that closed during the drain without completing (the client went away, the connection was cut). */
	readonly aborted: number;
	/** Requests answered with the drain 503 (or, asking for an event stream, a `retry:` and an end). */
	readonly rejected: number;
	/**
	 * Requests a retiring worker sent to another one (an event stream told to
	 * reconnect, a WebSocket handshake answered 503 with `Retry-After: 0`): the
	 * pod serves them, so they are not `rejected`.
	 */
	readonly redirected: number;
	/** Upgraded connections and event streams the app left open, closed by the drain. */
	readonly closedLongLived: number;
	/** Of those, the ones whose close did not complete in time and were destroyed. */
	readonly longLivedCut: number;
}

export type TallyField = keyof Tally;

/** `requests`: unknown (not 0) where no worker counted its requests; `connections`: the drain's own closes, known either way. */
export const TALLY: Readonly<Record<TallyField, 'requests' | 'connections'>> = {
	served: 'requests',
	aborted: 'requests',
	rejected: 'requests',
	redirected: 'requests',
	closedLongLived: 'connections',
	longLivedCut: 'connections',
};

export const TALLY_FIELDS = Object.keys(TALLY) as readonly TallyField[];
const OPEN: Readonly<Record<keyof Open, true>> = {inflight: true, upgrades: true, streams: true};
export const OPEN_FIELDS = Object.keys(OPEN) as ReadonlyArray<keyof Open>;

export interface Counts extends Open, Tally {}

/** What one request filter counts: the long-lived closes are its process's (worker/long-lived.ts). */
export type FilterCounts = Omit<Counts, 'closedLongLived' | 'longLivedCut'>;
const FILTER_FIELDS = [...OPEN_FIELDS, ...TALLY_FIELDS.filter(field => field !== 'closedLongLived' && field !== 'longLivedCut')] as ReadonlyArray<keyof FilterCounts>;
const COUNT_FIELDS: ReadonlyArray<keyof Counts> = [...OPEN_FIELDS, ...TALLY_FIELDS];

/** Reads each field once: a filter's counts are getters. */
function sum<K extends keyof Counts>(fields: readonly K[], parts: Iterable<Readonly<Record<K, number>> | undefined>): Record<K, number> {
	const total = {} as Record<K, number>;
	for (const field of fields) {
		total[field] = 0;
	}

	for (const part of parts) {
		if (part !== undefined) {
			for (const field of fields) {
				total[field] += part[field];
			}
		}
	}

	return total;
}

export const sumFilterCounts = (filters: Iterable<FilterCounts>): FilterCounts => sum(FILTER_FIELDS, filters);

export const sumOpen = (parts: Iterable<Open | undefined>): Open => sum(OPEN_FIELDS, parts);

export const openOf = ({inflight, upgrades, streams}: Open): Open => ({inflight, upgrades, streams});

/** No connection and no request open: a worker that said its requests are done. */
export const NOTHING_OPEN: Open = {inflight: 0, upgrades: 0, streams: 0};

/** A figure `counts` lacks (an older helper leaves out the figures added later) is `last`'s, or 0. */
export function tallyOf(counts: Partial<Tally> | undefined, last?: Tally): Tally {
	return Object.fromEntries(TALLY_FIELDS.map(field => [field, counts?.[field] ?? last?.[field] ?? 0])) as Record<TallyField, number>;
}

/** A plain copy of `counts` (getters read once), for a message or a log line. */
export const copyCounts = (counts: Counts): Counts => sum(COUNT_FIELDS, [counts]);

export const countsKey = (counts: Counts): string => COUNT_FIELDS.map(field => counts[field]).join(' ');
