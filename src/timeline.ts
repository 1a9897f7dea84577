/**
 * The drain timeline, written once for the CLI, the primary, the workers and
 * standalone mode.
 *
 *   signal ──serve──▶ reject ──reject──▶ stop listening … requests finish … ──▶ deadline
 *   t = 0             serve              serve + reject                         grace
 */
import {formatDuration} from './duration.js';
import {UsageError} from './errors.js';

export interface Timeline {
	/** After the signal, keep serving new requests (with `Connection: close`) this long. */
	readonly servePeriodMs: number;
	/** Then answer new requests 503 + `Retry-After` this long, while load balancers notice. */
	readonly rejectPeriodMs: number;
	/** Hard deadline, counted from the signal: whatever still runs is killed. */
	readonly gracePeriodMs: number;
}

/**
 * 20 s of rejection inside a 90 s budget: docs/guide.md's ALB + Linkerd
 * deployment, whose proxy waits 90 s (https://linkerd.io/2/tasks/graceful-shutdown/).
 */
export const DEFAULT_TIMELINE: Timeline = {servePeriodMs: 0, rejectPeriodMs: 20_000, gracePeriodMs: 90_000};

/**
 * Sooner than this, a second stop signal is the same Ctrl-C forwarded again by
 * a wrapper such as npm (clusterio/clusterio#217): npm 11's copy arrives
 * 0.02-3 ms behind (`node bench/signals.js --only copies`), a loaded CI
 * primary handled it up to 60 ms later. A person's second press, 100 ms or
 * more after the first, means "stop now".
 */
export const DUPLICATE_SIGNAL_MS = 100;

export const isDuplicateSignal = (firstAt: number, now: number): boolean => now - firstAt < DUPLICATE_SIGNAL_MS;

/** Given to a worker still starting at the drain once it listens, for its other servers and the shutdown code its listen callbacks register. */
export const LISTEN_SETTLE_MS = 1000;

export const rejectEndsAt = (timeline: Timeline): number => timeline.servePeriodMs + timeline.rejectPeriodMs;

/** A drain's stretches, in order; their index is `graceful_cluster_drain_phase`. */
export const TIMELINE_PHASES = ['serving', 'serve', 'reject', 'closing', 'stopping'] as const;
export type TimelinePhase = (typeof TIMELINE_PHASES)[number];

/** Where a drain stands `elapsedMs` after its signal, its reject phase ending at `rejectEndMs` (earlier than the timeline's after an adaptive end). */
export function phaseAt(timeline: Timeline, elapsedMs: number, rejectEndMs = rejectEndsAt(timeline)): Extract<TimelinePhase, 'serve' | 'reject' | 'closing'> {
	if (elapsedMs < timeline.servePeriodMs) {
		return 'serve';
	}

	return elapsedMs < rejectEndMs ? 'reject' : 'closing';
}

/** As the drain message carries it: a drain that starts late (a message that waited) keeps the original moments. */
export function remaining(timeline: Timeline, elapsedMs: number): Timeline {
	const elapsed = Math.max(0, Math.round(elapsedMs));
	const serve = Math.max(0, timeline.servePeriodMs - elapsed);
	const rejectEnd = Math.max(0, rejectEndsAt(timeline) - elapsed);
	return {servePeriodMs: serve, rejectPeriodMs: rejectEnd - serve, gracePeriodMs: Math.max(0, timeline.gracePeriodMs - elapsed)};
}

/** `name` says how the user wrote each setting: a flag, or a `GRACEFUL_CLUSTER_*` variable in standalone mode. */
export function checkTimeline(timeline: Timeline, name: (flag: string) => string = flag => `--${flag}`): void {
	const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = timeline;
	if (rejectEndsAt(timeline) >= gracePeriodMs) {
		throw new UsageError(
			`${name('serve-period')} (${formatDuration(servePeriodMs)}) + ${name('reject-period')} (${formatDuration(rejectPeriodMs)}) must be less than ${name('grace-period')} (${formatDuration(gracePeriodMs)}), `
			+ `or in-flight requests get no time to finish. Raise ${name('grace-period')} or shorten the other two.`,
		);
	}
}
