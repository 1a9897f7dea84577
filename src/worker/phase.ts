/**
 * A worker's drain phases, as data: the states of the phase machine
 * (drain.ts), and what each means for the filters in front of the servers,
 * mapped once here: the mode new requests are answered in (`modeFor`) and
 * whether listening has stopped (`stopsAccepting`). The timeline's phases
 * (timeline.ts), with `hooks` and `done` inside its `closing`:
 *
 *   serving -> serve -> reject -> closing -> hooks -> done
 *   serving -> retiring -> hooks -> done            (reload: a replacement is listening)
 */
import type {TimelinePhase} from '../timeline.js';
import {Mode} from './filter.js';

export type Phase =
	| {readonly name: Extract<TimelinePhase, 'serving'>}
	| {readonly name: Extract<TimelinePhase, 'serve' | 'reject' | 'closing'> | 'hooks'; readonly startedAt: number}
	/** Reload: replaced by a new worker; leaves once idle and the linger is over. */
	| {readonly name: 'retiring'; readonly startedAt: number; lingering: boolean}
	| {readonly name: 'done'};

export type PhaseName = Phase['name'];

/** What the request filters do in each phase: the one place the two are mapped. */
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

/** How a phase stops the servers from taking new connections (filter.ts `stopAccepting`). */
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
