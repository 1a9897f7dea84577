/**
 * The app's own listeners for the signals graceful-cluster gives a meaning,
 * held: they never run at the signal, but once, after the requests in flight.
 *
 * The usual hand-written shutdown, `process.on('SIGTERM', () => server.close(() =>
 * process.exit(0)))`, fights the drain: on a group signal (Ctrl-C, Ctrl-\,
 * systemd's `KillMode=control-group`) every worker would close at once,
 * refusing the reject phase's requests; when only the primary is signalled
 * (Kubernetes, Docker) it would never run, and its cleanup would be skipped.
 * Libraries do the same (close-with-grace, lightship, terminus, NestJS's
 * `enableShutdownHooks()`, which also listens for SIGQUIT, SIGHUP and SIGUSR2).
 * So the app's listeners for those signals are kept here as it registers them,
 * and called at the end of a drain or of a reload's retirement, with the
 * signal that was received (`callListeners`). Signals graceful-cluster does not
 * use are left to the app.
 *
 * Installed by the bootstrap in a cluster worker (before the app's first line;
 * the drain and reload signals) and by `attach()` in standalone mode (SIGTERM
 * and SIGINT, the ones standalone drains on; it also moves the listeners the
 * app registered before it). The bootstrap and the app's copy of `attach()` may
 * be two installs of this package: they meet on a global under a versioned
 * `Symbol.for` key, and only plain data and functions cross it.
 */
import os from 'node:os';

export interface HeldListener {
	/** The signal the app registered it for. */
	readonly signal: NodeJS.Signals;
	readonly listener: (...args: unknown[]) => unknown;
}

export interface SignalListeners {
	readonly v: 1;
	/** The app's listeners, in the order it registered them. */
	readonly held: HeldListener[];
	/** The first stop signal this process received itself, if any. */
	received: NodeJS.Signals | undefined;
	/**
	 * Who calls them: the bootstrap (a worker whose app never attached: when its
	 * basic drain ends) until `attach()` claims them (after its hooks).
	 */
	owner: 'bootstrap' | 'attach';
	/**
	 * Adds one of graceful-cluster's own listeners, past the interception; the
	 * app's `removeAllListeners()` leaves it in place.
	 */
	// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a listener typed for its event, as process.on() takes one
	listenOurselves(event: string, listener: (...args: any[]) => void): void;
	/** Each held listener is called at most once. */
	readonly ran: Set<HeldListener>;
	/**
	 * Set while the app's own shutdown runs: a held signal the app sends itself
	 * (`process.kill(process.pid, signal)`: terminus and NestJS re-raise theirs
	 * when their cleanup is done, expecting to die of it) comes here instead of
	 * being delivered. It means "end now" only as Node would take it: when the
	 * app has no listener left for that signal (`endsProcess`). Optional: a
	 * holder made by an older copy lacks it.
	 */
	onSelfSignal?: ((signal: NodeJS.Signals) => void) | undefined;
	/**
	 * Called after the app registers a listener for a held signal. The
	 * bootstrap sets it when a leave found no listener to run (the app still
	 * loading, or lazy): a listener registered then must still hear of it.
	 * Optional, as `onSelfSignal`.
	 */
	onHeld?: ((entry: HeldListener) => void) | undefined;
}

/**
 * Whether a signal the app sent itself would end the process under plain Node:
 * only when no listener of the app's is left for it. signal-exit re-raises only
 * when it thinks it is alone, and terminus and NestJS take theirs off first.
 */
export const endsProcess = (holder: SignalListeners, signal: NodeJS.Signals): boolean => !holder.held.some(entry => entry.signal === signal);

/** The stop signals, in the order a leave falls back on their listeners (`listenersFor`). */
export const STOP_SIGNALS: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGQUIT'];

const KEY = Symbol.for('graceful-cluster.signal-listeners.v1');

export function getSignalListeners(): SignalListeners | undefined {
	return (globalThis as Record<symbol, SignalListeners | undefined>)[KEY];
}

type Listener = (...args: unknown[]) => void;

/** A signal as `process.kill()` takes it (a name or a number; none is SIGTERM), as a name. */
function signalName(signal: string | number | undefined): string | undefined {
	if (signal === undefined) {
		return 'SIGTERM';
	}

	if (typeof signal === 'string') {
		return signal;
	}

	return Object.entries(os.constants.signals).find(([, number]) => number === signal)?.[0];
}

/**
 * Starts holding `signals`: from now on the app's listeners for them are kept
 * here, not on `process`; the ones already on `process` move here too (the
 * app's, registered before `attach()` in standalone mode; in a worker, a
 * `--require` preload's, such as an APM agent's). With `ownExisting`, every
 * other listener already there is ours (the bootstrap's: node:cluster's IPC
 * listeners), out of reach of the app's `removeAllListeners()`. Idempotent: a
 * second call returns the first one's holder.
 */
export function holdSignalListeners({ownExisting, signals}: {ownExisting: boolean; signals: readonly NodeJS.Signals[]}): SignalListeners {
	const existing = getSignalListeners();
	if (existing) {
		return existing;
	}

	const held = new Set<string | symbol>(signals);
	type Method = (event: string | symbol, listener: Listener) => NodeJS.Process;
	const bind = (method: unknown): Method => (method as Method).bind(process);
	const original = {
		on: bind(process.on),
		once: bind(process.once),
		prependListener: bind(process.prependListener),
		prependOnceListener: bind(process.prependOnceListener),
		removeListener: bind(process.removeListener),
		listeners: process.listeners.bind(process) as (event: string | symbol) => Listener[],
		rawListeners: process.rawListeners.bind(process) as (event: string | symbol) => Listener[],
		listenerCount: process.listenerCount.bind(process) as (event: string | symbol) => number,
		kill: process.kill.bind(process),
	};
	const listeners: HeldListener[] = [];
	// Listeners the app must not take away with `removeAllListeners()`: ours (the
	// IPC channel, the handlers that keep a worker alive through a group signal)
	// and, in a worker, whatever node:cluster put there before the app ran.
	const ours = new Map<string | symbol, Set<unknown>>();
	const keep = (event: string | symbol, listener: unknown): void => {
		let set = ours.get(event);
		if (!set) {
			set = new Set();
			ours.set(event, set);
		}

		set.add(listener);
	};

	if (ownExisting) {
		for (const event of process.eventNames()) {
			if (!held.has(event)) {
				for (const listener of process.rawListeners(event)) {
					keep(event, listener);
				}
			}
		}
	}

	const holder: SignalListeners = {
		v: 1,
		held: listeners,
		received: undefined,
		owner: 'bootstrap',
		ran: new Set(),
		onSelfSignal: undefined,
		onHeld: undefined,
		listenOurselves(event, listener) {
			keep(event, listener);
			original.on(event, listener as Listener);
		},
	};

	for (const signal of signals) {
		// rawListeners: a `once` listener stays wrapped, so calling it keeps its once-ness.
		for (const listener of process.rawListeners(signal) as Listener[]) {
			original.removeListener(signal, listener);
			listeners.push({signal, listener});
		}
	}

	const hold = (first: boolean) => (event: string | symbol, listener: Listener): NodeJS.Process => {
		const entry = {signal: event as NodeJS.Signals, listener};
		if (first) {
			listeners.unshift(entry);
		} else {
			listeners.push(entry);
		}

		holder.onHeld?.(entry);
		return process;
	};

	const of = (event: string | symbol): HeldListener[] => listeners.filter(entry => entry.signal === event);
	const unwrap = (listener: Listener): Listener => (listener as Listener & {listener?: Listener}).listener ?? listener;
	const patch = {
		// What the app sees of a held signal is what it registered: a library that
		// asks "am I the only listener?" (signal-exit) must get the app's answer,
		// not graceful-cluster's own handler.
		listeners: (event: string | symbol) => held.has(event) ? of(event).map(entry => unwrap(entry.listener as Listener)) : original.listeners(event),
		rawListeners: (event: string | symbol) => held.has(event) ? of(event).map(entry => entry.listener) : original.rawListeners(event),
		listenerCount: (event: string | symbol) => held.has(event) ? of(event).length : original.listenerCount(event),
		on: (event: string | symbol, listener: Listener) => held.has(event) ? hold(false)(event, listener) : original.on(event, listener),
		// Each held listener is called once anyway: `once` holds it like `on`.
		once: (event: string | symbol, listener: Listener) => held.has(event) ? hold(false)(event, listener) : original.once(event, listener),
		prependListener: (event: string | symbol, listener: Listener) => held.has(event) ? hold(true)(event, listener) : original.prependListener(event, listener),
		prependOnceListener: (event: string | symbol, listener: Listener) => held.has(event) ? hold(true)(event, listener) : original.prependOnceListener(event, listener),
		removeListener(event: string | symbol, listener: Listener) {
			if (held.has(event)) {
				// Like EventEmitter: the most recently added match goes.
				for (let index = listeners.length - 1; index >= 0; index--) {
					if (listeners[index]!.signal === event && listeners[index]!.listener === listener) {
						listeners.splice(index, 1);
						return process;
					}
				}
			}

			return original.removeListener(event, listener);
		},
		removeAllListeners(event?: string | symbol) {
			// Like EventEmitter's, but ours stay: without them a worker would die
			// of the next group signal, or never hear the drain.
			// All of them: the held ones too, which `process.eventNames()` does not know.
			const names = event === undefined ? new Set([...process.eventNames(), ...held]) : [event];
			for (const name of names) {
				if (held.has(name)) {
					for (let index = listeners.length - 1; index >= 0; index--) {
						if (listeners[index]!.signal === name) {
							listeners.splice(index, 1);
						}
					}
				}

				for (const listener of original.rawListeners(name)) {
					if (!ours.get(name)?.has(listener)) {
						original.removeListener(name, listener as Listener);
					}
				}
			}

			return process;
		},
		kill(pid: number, signal?: string | number): true {
			const name = signalName(signal);
			if (holder.onSelfSignal && Number(pid) === process.pid && name !== undefined && held.has(name)) {
				holder.onSelfSignal(name as NodeJS.Signals);
				return true;
			}

			return original.kill(pid, signal);
		},
	};
	Object.assign(process, {...patch, addListener: patch.on, off: patch.removeListener});
	(globalThis as Record<symbol, SignalListeners>)[KEY] = holder;
	return holder;
}

/**
 * The listeners a leave calls for `received`: those the app registered for it;
 * if it has none, those of the first stop signal it listens for (a Ctrl-C
 * handler when Kubernetes sent SIGTERM: under plain Node the SIGTERM would
 * kill the process and skip it; here nothing of the app's is skipped). A
 * reload's retiring worker is stopping whatever the signal means to the app
 * (a SIGHUP listener may only re-read its config): `retiring` adds the first
 * stop signal's listeners after the received one's. Each function once, in
 * the order registered: an app often registers one shutdown function for
 * several signals, and it must not run twice (a pool ended twice throws).
 */
export function listenersFor(holder: SignalListeners, received: NodeJS.Signals, {retiring = false}: {retiring?: boolean} = {}): HeldListener[] {
	const of = (signal: NodeJS.Signals): HeldListener[] => holder.held.filter(entry => entry.signal === signal);
	const stop = STOP_SIGNALS.map(of).find(entries => entries.length > 0) ?? [];
	const own = of(received);
	const chosen = own.length === 0 ? stop : (retiring ? [...own, ...stop] : own);
	// Functions already called, under any signal: a function the app registered
	// for two signals in two turns must not run a second time either.
	const seen = new Set<HeldListener['listener']>([...holder.ran].map(entry => entry.listener));
	return chosen.filter(entry => {
		const first = !seen.has(entry.listener);
		seen.add(entry.listener);
		return first;
	});
}

/** True when `entry`'s function is registered for a stop signal: shutdown code, whatever signal it is called for now. */
export const isStopListener = (holder: SignalListeners, entry: HeldListener): boolean => holder.held.some(other => other.listener === entry.listener && STOP_SIGNALS.includes(other.signal));

/** A held listener's name in the log: the signal received, and the function's name if it has one. */
export const listenerName = (entry: HeldListener, received: NodeJS.Signals): string => `${received} listener${entry.listener.name ? ` ${entry.listener.name}` : ''}`;

/**
 * Calls `entries` as Node's `process.emit(received)` would: in order, at once,
 * each with the signal's name, not waiting for one to finish before the next.
 * A listener that throws does not stop the others (Node would crash the
 * process); `onError` hears of it, and of a returned promise that rejects.
 * Returns the listeners' names, for the log.
 */
export function callListeners(holder: SignalListeners, entries: readonly HeldListener[], received: NodeJS.Signals, onError: (name: string, error: unknown) => void): string[] {
	const names = entries.map(entry => listenerName(entry, received));
	for (const [index, entry] of entries.entries()) {
		if (holder.ran.has(entry)) {
			continue;
		}

		holder.ran.add(entry);
		const name = names[index]!;
		try {
			const result = entry.listener.call(process, received);
			// Any thenable (Bluebird's too), not only a native Promise.
			if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') {
				Promise.resolve(result).catch((error: unknown) => {
					onError(name, error);
				});
			}
		} catch (error) {
			onError(name, error);
		}
	}

	return names;
}
