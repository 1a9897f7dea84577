/**
 * The drain timeline, written once. Every side reads it from here: the CLI for
 * its defaults and checks, the primary for its deadline and the drain message,
 * a worker for its phases, standalone mode for all of it.
 *
 *   signal ──serve──▶ reject ──reject──▶ stop listening … requests finish … ──▶ deadline
 *   t = 0             serve              serve + reject                         grace
 *
 * A cluster worker learns the timeline by one route only: the drain message,
 * which carries what is left of it when the primary sends it (`remaining`).
 *
 * The stretches have one set of names (`TimelinePhase`): a worker's phase
 * machine adds `hooks` and `done` inside `closing`, and `retiring` for a
 * reload (worker/phase.ts); /status and `graceful_cluster_drain_phase` show
 * them as they are. The primary's drain and its worker records have states of
 * their own: where a process is in its life, not where the drain is.
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
 * 20 s of rejection inside a 90 s budget: Linkerd's proxy waits 90 s, Kubernetes
 * gives 120 s (RESEARCH.md section 5).
 */
export const DEFAULT_TIMELINE: Timeline = {servePeriodMs: 0, rejectPeriodMs: 20_000, gracePeriodMs: 90_000};

/**
 * A second stop signal sooner than this after the first is the same event
 * delivered twice: a terminal's Ctrl-C reaches the process group and a wrapper
 * such as npm forwards it again (clusterio/clusterio#217). Measured with npm 11
 * (bench/signal-copies.sh): its copy arrives 0.02-3 ms behind the terminal's, on
 * two cores under four busy loops too; but a loaded primary handles the copy
 * up to 60 ms after the first (CI). A person's second press comes 100 ms or
 * more after the first: that one means "stop now".
 */
export const DUPLICATE_SIGNAL_MS = 100;

export const isDuplicateSignal = (firstAt: number, now: number): boolean => now - firstAt < DUPLICATE_SIGNAL_MS;

/**
 * How long a worker that was still starting when the drain reached it is given
 * after its first server listens, for its other servers (an admin or metrics
 * port often listens just after the first) and for the shutdown code its
 * listen callbacks register (lightship's), before it leaves.
 */
export const LISTEN_SETTLE_MS = 1000;

/** When, from the signal, the reject phase ends and listening stops. */
export const rejectEndsAt = (timeline: Timeline): number => timeline.servePeriodMs + timeline.rejectPeriodMs;

/**
 * A drain's stretches, in order: before the signal, new requests served, new
 * requests refused, listening stopped while requests finish and the app shuts
 * down, the workers left being killed or the drain over. Their index is
 * `graceful_cluster_drain_phase`.
 */
export const TIMELINE_PHASES = ['serving', 'serve', 'reject', 'closing', 'stopping'] as const;
export type TimelinePhase = (typeof TIMELINE_PHASES)[number];

/** Where a drain stands `elapsedMs` after its signal, its reject phase ending at `rejectEndMs` (earlier than the timeline's after an adaptive end). */
export function phaseAt(timeline: Timeline, elapsedMs: number, rejectEndMs = rejectEndsAt(timeline)): Extract<TimelinePhase, 'serve' | 'reject' | 'closing'> {
	if (elapsedMs < timeline.servePeriodMs) {
		return 'serve';
	}

	return elapsedMs < rejectEndMs ? 'reject' : 'closing';
}

/**
 * What is left of `timeline` `elapsedMs` after the signal: phases already (partly)
 * over are shortened, none goes below 0. A drain that starts late (a worker that
 * attached after the signal, a message that waited) keeps the original moments.
 */
export function remaining(timeline: Timeline, elapsedMs: number): Timeline {
	const elapsed = Math.max(0, Math.round(elapsedMs));
	const serve = Math.max(0, timeline.servePeriodMs - elapsed);
	const rejectEnd = Math.max(0, rejectEndsAt(timeline) - elapsed);
	return {servePeriodMs: serve, rejectPeriodMs: rejectEnd - serve, gracePeriodMs: Math.max(0, timeline.gracePeriodMs - elapsed)};
}

/**
 * Rejects timelines that cannot work: the deadline must leave time after the
 * reject phase. `name` says how the user wrote each setting (a flag for the
 * CLI, a `GRACEFUL_CLUSTER_*` variable in standalone mode).
 */
export function checkTimeline(timeline: Timeline, name: (flag: string) => string = flag => `--${flag}`): void {
	const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = timeline;
	if (rejectEndsAt(timeline) >= gracePeriodMs) {
		throw new UsageError(
			`${name('serve-period')} (${formatDuration(servePeriodMs)}) + ${name('reject-period')} (${formatDuration(rejectPeriodMs)}) must be less than ${name('grace-period')} (${formatDuration(gracePeriodMs)}), `
			+ `or in-flight requests get no time to finish. Raise ${name('grace-period')} or shorten the other two.`,
		);
	}
}
