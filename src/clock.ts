/**
 * Time as the drain sees it: `now()` and timers. Every timed decision of the
 * primary and of a worker's drain goes through a `Clock`, so unit tests drive
 * them with a fake one (test/helpers/fakes.ts): exact, and without sleeps.
 */
import {performance} from 'node:perf_hooks';

/** A timer handle; only the clock that made it can clear it. */
export type Timer = {readonly __timer: unique symbol};

export interface Clock {
	/** Milliseconds on a monotonic clock (`performance.now()`). */
	now(): number;
	setTimeout(fn: () => void, ms: number): Timer;
	setInterval(fn: () => void, ms: number): Timer;
	clear(timer: Timer | undefined): void;
}

export const systemClock: Clock = {
	now: () => performance.now(),
	setTimeout: (fn, ms) => setTimeout(fn, ms) as unknown as Timer,
	setInterval: (fn, ms) => setInterval(fn, ms) as unknown as Timer,
	clear(timer) {
		if (timer !== undefined) {
			clearTimeout(timer as unknown as NodeJS.Timeout);
		}
	},
};

/** Timers that are cleared together when their owner is done (a drain, a fleet). */
export class TimerGroup {
	private readonly timers = new Set<Timer>();

	constructor(readonly clock: Clock) {}

	timeout(fn: () => void, ms: number): Timer {
		const timer = this.clock.setTimeout(() => {
			this.timers.delete(timer);
			fn();
		}, ms);
		this.timers.add(timer);
		return timer;
	}

	interval(fn: () => void, ms: number): Timer {
		const timer = this.clock.setInterval(fn, ms);
		this.timers.add(timer);
		return timer;
	}

	clear(timer: Timer | undefined): void {
		if (timer !== undefined) {
			this.clock.clear(timer);
			this.timers.delete(timer);
		}
	}

	clearAll(): void {
		for (const timer of this.timers) {
			this.clock.clear(timer);
		}

		this.timers.clear();
	}
}
