/** How a drain ends, decided in one place: which of its workers left as planned, and the exit code. */
import {ExitCode} from '../exit-codes.js';
import {basicDrainEnd, killReason, lastLive, leftByBasicDrain, placeOf, type WorkerRecord} from './worker-record.js';

/** What killed the workers left, if anything did. */
export type ForcedBy = 'deadline' | 'second-signal';

export function leftCleanly(record: WorkerRecord): boolean {
	const {state} = record;
	if (state.name !== 'gone') {
		return true;
	}

	// Its requests were done: whatever ended its hooks (its own exit, the
	// deadline's kill) is a hook's failure (`hookFailures`), not a lost worker.
	const last = lastLive(state).name;
	if (last === 'drained' || last === 'hooks') {
		return true;
	}

	// It never listened, so it held no request: a group signal that reached it
	// while it was still loading (before the bootstrap's handlers) loses nothing.
	if (placeOf(state).name === 'starting' && killReason(state) === undefined) {
		return true;
	}

	// Disconnected by its basic drain, it ran its own shutdown from then: how
	// that ended is the shutdown's verdict (`hookFailures`), not a loss.
	if (basicDrainEnd(record) !== undefined) {
		return true;
	}

	return leftByBasicDrain(state);
}

/** Requests first (a kill, a lost worker), then the app's shutdown code (a failed hook). */
export function outcome(forced: ForcedBy | undefined, lost: number, hooksFailed = 0): ExitCode {
	if (forced === 'second-signal') {
		return ExitCode.SECOND_SIGNAL;
	}

	if (forced === 'deadline') {
		return ExitCode.DEADLINE;
	}

	if (lost > 0) {
		return ExitCode.WORKER_LOST;
	}

	return hooksFailed > 0 ? ExitCode.HOOK_FAILED : ExitCode.OK;
}

