/**
 * `drain finished`, the drain's last line, built here for the cluster's primary
 * and a process on its own (worker/standalone.ts): both give the same fields in
 * the same order, and name the outcome in the same words.
 */
import {TALLY, TALLY_FIELDS, type Tally, type TallyField} from './counts.js';
import {ExitCode} from './exit-codes.js';
import type {Logger} from './logger.js';

/** `clean` only when every request was seen and none was cut: a clean exit with a server nothing counted is `uncounted`. */
export type Outcome = 'clean' | 'uncounted' | 'hooks-failed' | 'forced';

/** A figure of the tally, or null where nothing counted it (counts.ts `TALLY`). */
export type Figures = {readonly [K in TallyField]: number | null};

export interface DrainFinished {
	readonly signal: string | undefined;
	readonly durationMs: number;
	readonly figures: Figures | Tally;
	/** The app's shutdown code that failed: hooks, its own listeners, a failing exit code. */
	readonly hooksFailed: number;
	/** Requests in flight when a kill or a loss cut them; null where nothing counted them. */
	readonly responsesCut: number | null;
	readonly exitCode: number;
	/** The drain ended on the app's own failing exit code (standalone): its shutdown failed, whatever the number. */
	readonly appExit?: boolean;
	/** Servers nothing counted (their addresses): `uncounted` where the exit is clean. */
	readonly uncounted?: readonly string[];
	/** What only one side knows (the workers, the arrivals), shown before the outcome. */
	readonly more?: object | undefined;
	/** What follows the outcome (the lost workers, one by one). */
	readonly after?: object | undefined;
}

function outcomeOf({exitCode, appExit = false, uncounted = []}: Pick<DrainFinished, 'exitCode' | 'appExit' | 'uncounted'>): Outcome {
	if (exitCode === ExitCode.OK) {
		return uncounted.length > 0 ? 'uncounted' : 'clean';
	}

	return exitCode === ExitCode.HOOK_FAILED || appExit ? 'hooks-failed' : 'forced';
}

/** The tally's figures, each from `figure`; the requests' are null where `requestsCounted` is false. */
export function figures(figure: (field: TallyField) => number, requestsCounted: boolean): Figures {
	return Object.fromEntries(TALLY_FIELDS.map(field => [field, requestsCounted || TALLY[field] === 'connections' ? figure(field) : null])) as Figures;
}

export function logDrainFinished(logger: Logger, line: DrainFinished): void {
	const fields = {
		signal: line.signal,
		durationMs: line.durationMs,
		...line.figures,
		hooksFailed: line.hooksFailed,
		responsesCut: line.responsesCut,
		...(line.uncounted ? {uncounted: line.uncounted} : {}),
		...line.more,
		outcome: outcomeOf(line),
		exitCode: line.exitCode,
		...line.after,
	};
	if (line.exitCode === ExitCode.OK) {
		logger.info(fields, 'drain finished');
	} else {
		logger.error(fields, 'drain finished');
	}
}
