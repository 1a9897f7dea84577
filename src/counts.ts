/**
 * What a drain counts, in one shape: a filter's, a process's (the sum of its
 * filters), a worker's report to the primary (protocol.ts), the cluster's (the
 * sum of the reports). One type and one way to add them up, so a count cannot
 * be spelled differently on the two sides of the IPC channel.
 */
export interface Counts {
	/** Requests (HTTP/2 streams) handed to the app whose response has not closed yet; long-lived ones apart. */
	readonly inflight: number;
	/** Responses to app requests that completed during the drain. */
	readonly served: number;
	/**
	 * Responses to app requests that closed during the drain without
	 * completing: the client went away, the app destroyed the response, or its
	 * connection was cut. Never in `served`.
	 */
	readonly aborted: number;
	/** Requests answered with the drain 503 (or, asking for an event stream, a `retry:` and an end). */
	readonly rejected: number;
	/** Upgraded connections (WebSockets) still open. Never counted in `inflight`. */
	readonly upgrades: number;
	/** Event-stream responses still open, once sorted out of `inflight` at drain time. */
	readonly streams: number;
}

/**
 * The sum of `parts`; a part may be missing (a worker that never reported).
 * Reads each field once: a filter's counts are getters.
 */
export function sumCounts(parts: Iterable<Counts | undefined>): Counts {
	let inflight = 0;
	let served = 0;
	let aborted = 0;
	let rejected = 0;
	let upgrades = 0;
	let streams = 0;
	for (const part of parts) {
		if (part !== undefined) {
			inflight += part.inflight;
			served += part.served;
			aborted += part.aborted;
			rejected += part.rejected;
			upgrades += part.upgrades;
			streams += part.streams;
		}
	}

	return {inflight, served, aborted, rejected, upgrades, streams};
}

/** A plain copy of `counts` (a filter's getters read once), for a message or a log line. */
export const copyCounts = (counts: Counts): Counts => sumCounts([counts]);
