/**
 * `--max-event-loop-delay` across the cluster: a shedding worker stays ready (the
 * others serve), unless every serving worker sheds; then the pod is overloaded and its
 * readiness probe answers 503 until one recovers. Each worker's heartbeat says whether
 * it sheds; the workers hear the cluster's verdict in a `shedding` message, sent when
 * it changes (and to a worker that joins while every worker sheds).
 */
import type {Fleet} from './fleet.js';
import {isServingMember, type WorkerRecord} from './worker-record.js';

/** True when at least one worker serves and every serving one sheds as of its last heartbeat. */
export function everyWorkerSheds(records: readonly WorkerRecord[]): boolean {
	const serving = records.filter(record => isServingMember(record));
	return serving.length > 0 && serving.every(record => record.health?.shedding === true);
}

export class ClusterShedding {
	private all = false;
	/** Told `all: true`; each is told `all: false` when that ends. */
	private readonly told = new Set<WorkerRecord>();

	constructor(private readonly fleet: Fleet) {
		fleet.on('message', (_record, message) => {
			if (message.type === 'heartbeat') {
				this.decide();
			}
		});
		fleet.on('gone', record => {
			this.told.delete(record);
			this.decide();
		});
	}

	get everyWorkerSheds(): boolean {
		return this.all;
	}

	private decide(): void {
		const all = everyWorkerSheds(this.fleet.alive);
		if (all) {
			for (const record of this.fleet.alive) {
				if (isServingMember(record) && !this.told.has(record)) {
					this.told.add(record);
					this.fleet.send(record, {type: 'shedding', all: true});
				}
			}
		} else if (this.all) {
			for (const record of this.told) {
				this.fleet.send(record, {type: 'shedding', all: false});
			}

			this.told.clear();
		}

		this.all = all;
	}
}
