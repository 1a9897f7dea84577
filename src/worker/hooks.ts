/**
 * The hook runner, shared by the cluster host, standalone mode and the bootstrap so
 * hooks are logged the same way everywhere. Hooks are where a drain hangs unseen (a
 * pool that never closes), so they are logged when they start, once per hook still
 * running after a second, and once if any still runs as the deadline nears.
 */
import {TimerGroup, type Clock} from '../clock.js';
import type {Logger} from '../logger.js';
import type {AppShutdown, AppShutdownEnd} from './app-shutdown.js';
import {EXIT_SETTLE_MS, ExitWatch, processExitListeners, runExitCleanup, type ExitListeners} from './app-exit.js';
import type {DrainReason} from './long-lived.js';

export type ShutdownHook = () => unknown;

export interface NamedHook {
	readonly name: string;
	readonly run: () => unknown;
}

export const SLOW_HOOK_MS = 1000;
/** So the log says which hook the kill will interrupt while there is still time to look (halfway to the deadline, if later). */
export const HOOK_DEADLINE_WARNING_MS = 5000;

export interface HookRun {
	readonly logger: Logger;
	readonly clock: Clock;
	/** `clock.now()` at which the deadline kills this process; undefined: unknown (a retire). */
	readonly deadlineAt?: number | undefined;
	/** Told before the next hook runs: the primary must know even if a later hook calls `process.exit()`. */
	readonly onFailure?: ((name: string) => Promise<void>) | undefined;
}

export function namedHooks(hooks: readonly ShutdownHook[]): NamedHook[] {
	return hooks.map((hook, index) => ({name: hook.name || `onShutdown hook ${index + 1}`, run: hook}));
}

export async function runHooks(hooks: readonly NamedHook[], {logger, clock, deadlineAt, onFailure}: HookRun): Promise<void> {
	const timers = new TimerGroup(clock);
	logger.info({hooks: hooks.map(hook => hook.name)}, 'running shutdown hooks');
	let running: NamedHook | undefined;
	if (deadlineAt !== undefined) {
		const left = deadlineAt - clock.now();
		timers.timeout(() => {
			if (running) {
				logger.warn({hook: running.name, deadlineInMs: Math.max(0, Math.round(deadlineAt - clock.now()))}, 'shutdown hooks still running as the deadline nears');
			}
		}, Math.max(left - HOOK_DEADLINE_WARNING_MS, left / 2));
	}

	try {
		for (const hook of hooks) {
			running = hook;
			const startedAt = clock.now();
			const slow = timers.timeout(() => {
				logger.warn({hook: hook.name, runningForMs: Math.round(clock.now() - startedAt)}, 'a shutdown hook is taking more than a second');
			}, SLOW_HOOK_MS);
			try {
				// eslint-disable-next-line no-await-in-loop -- hooks run one after another, in order
				await hook.run();
			} catch (error) {
				logger.error({err: error, hook: hook.name}, 'a shutdown hook failed; running the rest');
				// eslint-disable-next-line no-await-in-loop -- hooks run one after another, in order
				await onFailure?.(hook.name);
			}

			timers.clear(slow);
		}
	} finally {
		timers.clearAll();
	}
}

/** One process's shutdown, once its requests are done: `onShutdown()` hooks, then the app's signal listeners, then its `'beforeExit'` listeners. */
export class Shutdown {
	failed = 0;
	ended: AppShutdownEnd | undefined;
	app: AppShutdown | undefined;
	private readonly hooks: ShutdownHook[] = [];

	constructor(private readonly exitListeners: ExitListeners = processExitListeners) {}

	add(hook: ShutdownHook): void {
		if (typeof hook !== 'function') {
			throw new TypeError('graceful-cluster: onShutdown() takes a function.');
		}

		this.hooks.push(hook);
	}

	has(signal: NodeJS.Signals, reason: DrainReason): boolean {
		return this.hooks.length > 0 || this.app?.has(signal, reason) === true || this.exitListeners().length > 0;
	}

	async run(signal: NodeJS.Signals, reason: DrainReason, run: HookRun): Promise<void> {
		const onFailure = async (name: string): Promise<void> => {
			this.failed++;
			await run.onFailure?.(name);
		};

		const watch = new ExitWatch(run.logger);
		try {
			if (this.hooks.length > 0) {
				await runHooks(namedHooks(this.hooks).map(hook => ({name: hook.name, run: async () => watch.around(hook.name, async () => hook.run())})), {...run, onFailure});
			}

			const {app} = this;
			if (app?.has(signal, reason)) {
				this.ended = await watch.around(app.names(signal, reason).join(', '), async () => app.run(signal, reason, onFailure));
			}

			// Node ran them itself when the app's shutdown left the loop empty ('idle'); an app
			// that signalled itself meant to die of it, without them.
			if ((this.ended === undefined || this.ended === 'called') && this.exitListeners().length > 0) {
				await watch.around('the app\'s beforeExit listeners', async () => runExitCleanup(this.exitListeners, run.logger, onFailure, this.exitListeners === processExitListeners ? EXIT_SETTLE_MS : 0));
			}
		} finally {
			watch.stop();
		}
	}
}
