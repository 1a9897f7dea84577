/**
 * The probes, answered by the filter before any app code runs: which path is a
 * probe, and what it is answered in each filter mode. Both protocol adapters
 * ask here and only write the answer their own way.
 *
 * - Liveness: 200 until the process exits (a failing liveness probe would
 *   restart the container in the middle of its drain).
 * - Readiness: 200 while serving (once the app's readiness checks pass, if it
 *   gave any: readiness.ts) and while retiring in a reload (the pod is ready,
 *   its other workers serve); 503 from the first moment of a drain, at once,
 *   without running the checks.
 */
import {Mode, type FilterOptions} from './filter.js';
import type {ReadinessProbe} from './readiness.js';

const QUESTION_MARK = 63;

/** A probe's answer, which each protocol writes its own way. */
export interface ProbeAnswer {
	readonly status: number;
	readonly body: Buffer;
}

const READY: ProbeAnswer = {status: 200, body: Buffer.from('ready\n')};
const DRAINING: ProbeAnswer = {status: 503, body: Buffer.from('draining\n')};
const ALIVE: ProbeAnswer = {status: 200, body: Buffer.from('alive\n')};

/** True when `url` is `path` or `path?query`. An empty path never matches (probe turned off). */
export function isPath(url: string, path: string): boolean {
	return path !== '' && url.startsWith(path) && (url.length === path.length || url.charCodeAt(path.length) === QUESTION_MARK);
}

export type ProbeSettings = Pick<FilterOptions, 'readinessPath' | 'livenessPath'>;

export type ProbeKind = 'readiness' | 'liveness';

/** The readiness answer for a mode, without checks: ready while serving or retiring. */
const readinessFor = (mode: Mode): ProbeAnswer => (mode === Mode.SERVING || mode === Mode.RETIRE ? READY : DRAINING);

export class Probes {
	/** The app's readiness checks (`attach(server, {readinessChecks})`), run by the readiness probe while serving; absent: ready at once. */
	readiness: ReadinessProbe | undefined;

	constructor(private readonly settings: ProbeSettings) {}

	/** Which probe `url` asks for; undefined for every other request (two string compares on the hot path). */
	match(url: string): ProbeKind | undefined {
		if (isPath(url, this.settings.readinessPath)) {
			return 'readiness';
		}

		return isPath(url, this.settings.livenessPath) ? 'liveness' : undefined;
	}

	/**
	 * The answer to `kind` in the current mode: at once, or, for a readiness
	 * probe while serving with checks, once they ran: 200 when they pass, 503
	 * naming the failing ones. `mode` is read again when the checks are done:
	 * if the drain began meanwhile, the drain's answer.
	 */
	answer(kind: ProbeKind, mode: () => Mode): ProbeAnswer | Promise<ProbeAnswer> {
		if (kind === 'liveness') {
			return ALIVE;
		}

		const {readiness} = this;
		if (readiness === undefined || mode() !== Mode.SERVING) {
			return readinessFor(mode());
		}

		return readiness.probe().then(failures => (failures === undefined || mode() !== Mode.SERVING ? readinessFor(mode()) : {status: 503, body: failures}));
	}
}
