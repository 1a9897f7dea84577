/**
 * A worker's drain phases, and what each means for the filters: the mode new
 * requests are answered in and whether listening has stopped, mapped once here.
 * `hooks` and `done` are inside the timeline's `closing` (timeline.ts).
 */
import type {TimelinePhase} from '../timeline.js';
import {Mode} from './filter.js';

export type Phase =
	| {readonly name: Extract<TimelinePhase, 'serving'>}
	| {readonly name: Extract<TimelinePhase, 'serve' | 'reject' | 'closing'> | 'hooks'; readonly startedAt: number}
	/** Reload: leaves once idle and the linger is over. */
	| {readonly name: 'retiring'; readonly startedAt: number; lingering: boolean}
	| {readonly name: 'done'};

export type PhaseName = Phase['name'];

export function modeFor(phase: PhaseName): Mode {
	switch (phase) {
		case 'serving': {
			return Mode.SERVING;
		}

		case 'serve': {
			return Mode.DRAIN_SERVE;
		}

		case 'retiring': {
			return Mode.RETIRE;
		}

		case 'reject':
		case 'closing':
		case 'hooks':
		case 'done': {
			return Mode.REJECT;
		}

		default: {
			const never: never = phase;
			throw new Error(`unknown phase ${String(never)}`);
		}
	}
}

export function stopsAccepting(phase: PhaseName): 'no' | 'keep-idle' | 'close-idle' {
	switch (phase) {
		case 'serving':
		case 'serve':
		case 'reject': {
			return 'no';
		}

		case 'retiring': {
			// The linger gives clients about to reuse an idle connection their answer.
			return 'keep-idle';
		}

		case 'closing':
		case 'hooks':
		case 'done': {
			return 'close-idle';
		}

		default: {
			const never: never = phase;
			throw new Error(`unknown phase ${String(never)}`);
		}
	}
}
