/**
 * What the workers of one drain counted after its signal. A worker a reload or
 * a recycle had retired counts from its retire, so the drain takes its counts
 * at the signal and adds only what came after.
 */
import {TALLY_FIELDS, tallyOf, type Tally, type TallyField} from '../counts.js';
import type {InflightMessage} from '../protocol.js';
import {hookFailures, lastLive, type WorkerRecord} from './worker-record.js';

/** A worker in one of these when the signal came (or killed in one) had retired: its counts began then. */
const RETIRED_STATES: ReadonlySet<WorkerRecord['state']['name']> = new Set(['retiring', 'hooks', 'drained']);

interface AtSignal {
	readonly tally: Tally;
	readonly hooksFailed: number;
}

/**
 * Never below 0: a server the app took off (`detach()`) takes its counts with
 * it. A long-lived connection the drain had to cut counts as closed by the
 * drain too (`longLivedCut` is of `closedLongLived`).
 */
function sinceSignal(now: Tally, before: Tally | undefined): Tally {
	if (before === undefined) {
		return now;
	}

	const since = Object.fromEntries(TALLY_FIELDS.map(field => [field, Math.max(0, now[field] - before[field])])) as Record<TallyField, number>;
	since.closedLongLived = Math.max(since.closedLongLived, since.longLivedCut);
	return since;
}

export class CountsSinceSignal {
	/** The retirees, with what they had counted when the signal came. */
	private readonly before = new Map<WorkerRecord, AtSignal>();

	constructor(private readonly workers: readonly WorkerRecord[]) {
		for (const record of workers) {
			if (RETIRED_STATES.has(lastLive(record.state).name)) {
				this.before.set(record, {tally: tallyOf(record.report), hooksFailed: record.hooksFailed.length});
			}
		}
	}

	/** A retiree's own counts when the signal reached it: the primary's last copy may be older. */
	onReport(record: WorkerRecord, report: InflightMessage): void {
		const before = this.before.get(record);
		if (before !== undefined && report.atSignal === true) {
			this.before.set(record, {tally: tallyOf(report), hooksFailed: report.hooksFailed ?? before.hooksFailed});
		}
	}

	sum(field: TallyField): number {
		return this.workers.reduce((total, record) => total + sinceSignal(tallyOf(record.report), this.before.get(record)?.tally)[field], 0);
	}

	get hooksFailed(): number {
		return this.workers.reduce((sum, record) => sum + hookFailures(record) - (this.before.get(record)?.hooksFailed ?? 0), 0);
	}
}
