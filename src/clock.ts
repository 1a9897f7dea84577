/**
 * Time as the drain sees it: every timed decision goes through a `Clock`, so
 * unit tests drive them with a fake one (test/helpers/fakes.ts), exactly and
 * without sleeps. `withTimeout` is here because p-event is not loaded in workers.
 */
/** A timer handle; only the clock that made it can clear it. */
export type Timer = {readonly __timer: unique symbol};

export interface Clock {
	/** Milliseconds on a monotonic clock, from an arbitrary origin: for durations within one process. */
	now(): number;
	setTimeout(fn: () => void, ms: number): Timer;
	setInterval(fn: () => void, ms: number): Timer;
	clear(timer: Timer | undefined): void;
}

export const systemClock: Clock = {
	// Not performance.now(): its first call loads perf_hooks, about 1.5 ms of every start.
	now: () => Number(process.hrtime.bigint()) / 1e6,
	setTimeout: (fn, ms) => setTimeout(fn, ms) as unknown as Timer,
	setInterval: (fn, ms) => setInterval(fn, ms) as unknown as Timer,
	clear(timer) {
		if (timer !== undefined) {
			clearTimeout(timer as unknown as NodeJS.Timeout);
		}
	},
};

const backgroundClock: Clock = {
	...systemClock,
	setTimeout: (fn, ms) => setTimeout(fn, ms).unref() as unknown as Timer,
	setInterval: (fn, ms) => setInterval(fn, ms).unref() as unknown as Timer,
};

/** `clock` whose timers never keep the process alive: the system's, unref'd; a fake one as it is. */
export const inBackground = (clock: Clock): Clock => (clock === systemClock ? backgroundClock : clock);

const TIMED_OUT = Symbol('timed out');

/**
 * The default clock's timers are unref'd: a wait inside a worker must never
 * keep the app's process alive. The primary passes its own.
 */
export async function withTimeout<T>(promise: PromiseLike<T>, ms: number, onTimeout: () => T, clock: Clock = backgroundClock): Promise<T> {
	let timer: Timer | undefined;
	try {
		const first = await Promise.race([promise, new Promise<typeof TIMED_OUT>(resolve => {
			timer = clock.setTimeout(() => {
				resolve(TIMED_OUT);
			}, ms);
		})]);
		// Called here, not in the timer: a throw becomes this promise's rejection.
		return first === TIMED_OUT ? onTimeout() : first;
	} finally {
		clock.clear(timer);
	}
}

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
