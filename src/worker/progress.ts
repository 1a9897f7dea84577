/**
 * What a drain says as it goes: its counts to the host whenever one changed, at most
 * four times a second; and once a second, how many requests it rejected since the
 * last such line (an idle reject phase is quiet).
 */
import {copyCounts, countsKey, type Counts} from '../counts.js';
import type {Logger} from '../logger.js';

export const REPORT_INTERVAL_MS = 250;
export const SUMMARY_INTERVAL_MS = 1000;

export class DrainProgress {
	private last = '';
	private rejectedAtLastSummary = 0;

	/** `changes` moves with what else the reports carry (the arrivals). */
	constructor(private readonly counts: () => Counts, private readonly logger: Logger, private readonly changes: () => number = () => 0) {}

	report(host: {progress(counts: Counts): void} | undefined): void {
		const counts = copyCounts(this.counts());
		// Every figure: in an idle reject phase the tally is what moves, and a worker killed
		// later is judged by its last report.
		const key = `${countsKey(counts)} ${this.changes()}`;
		if (key !== this.last) {
			this.last = key;
			host?.progress(counts);
		}
	}

	summariseRejections(): void {
		const {rejected} = this.counts();
		const recent = rejected - this.rejectedAtLastSummary;
		if (recent > 0) {
			this.rejectedAtLastSummary = rejected;
			this.logger.info({rejectedRecently: recent, rejected}, 'rejected requests while draining');
		}
	}
}
