/**
 * Which path is a probe, and its answer in each filter mode; both adapters ask here
 * and write the answer their own way. Liveness: 200 until the process exits (a failing
 * liveness probe would restart the container mid-drain). Readiness: 200 while serving
 * (once the checks pass) and while retiring (the pod's other workers serve); 503 from
 * the drain's first moment, without running the checks.
 */
import {isLive, Mode, type FilterOptions} from './filter.js';
import type {ReadinessProbe} from './readiness.js';

const QUESTION_MARK = 63;

export interface ProbeAnswer {
	readonly status: number;
	readonly body: Buffer;
}

const READY: ProbeAnswer = {status: 200, body: Buffer.from('ready\n')};
const DRAINING: ProbeAnswer = {status: 503, body: Buffer.from('draining\n')};
const ALIVE: ProbeAnswer = {status: 200, body: Buffer.from('alive\n')};
/** Every worker sheds (`--max-event-loop-delay`): the pod is overloaded, and the load balancer should send elsewhere. */
const OVERLOADED: ProbeAnswer = {status: 503, body: Buffer.from('overloaded\n')};

/** An empty path never matches (probe turned off). */
export function isPath(url: string, path: string): boolean {
	return path !== '' && url.startsWith(path) && (url.length === path.length || url.charCodeAt(path.length) === QUESTION_MARK);
}

export type ProbeSettings = Pick<FilterOptions, 'readinessPath' | 'livenessPath' | 'everyWorkerSheds'>;

export type ProbeKind = 'readiness' | 'liveness';

const readinessFor = (mode: Mode): ProbeAnswer => (isLive(mode) || mode === Mode.RETIRE ? READY : DRAINING);

export class Probes {
	/** Absent: ready at once. */
	readiness: ReadinessProbe | undefined;

	constructor(private readonly settings: ProbeSettings) {}

	/** Two string compares on the hot path. */
	match(url: string): ProbeKind | undefined {
		if (isPath(url, this.settings.readinessPath)) {
			return 'readiness';
		}

		return isPath(url, this.settings.livenessPath) ? 'liveness' : undefined;
	}

	/** `mode` is read again when the checks are done: if the drain began meanwhile, the drain's answer. */
	answer(kind: ProbeKind, mode: () => Mode): ProbeAnswer | Promise<ProbeAnswer> {
		if (kind === 'liveness') {
			return ALIVE;
		}

		// A shedding worker is ready, unless every worker sheds.
		if (mode() === Mode.SHED && this.settings.everyWorkerSheds?.() === true) {
			return OVERLOADED;
		}

		const {readiness} = this;
		if (readiness === undefined || !isLive(mode())) {
			return readinessFor(mode());
		}

		return readiness.probe().then(failures => (failures === undefined || !isLive(mode()) ? readinessFor(mode()) : {status: 503, body: failures}));
	}
}
