/**
 * A worker's stdout and stderr on the way out.
 *
 * Under the CLI they are pipes to the primary, and a pipe write that does not
 * fit goes into a queue in this process that `process.exit()` throws away: a
 * hook printing 50,000 lines lost all but about 2,000. Two measures:
 *
 * - From the drain on, the pipes are made blocking, so a write leaves only once
 *   the primary has it, and an exit, ours or the app's own `process.exit()` in a
 *   hook or signal listener, leaves nothing behind (what was queued before
 *   goes out as the event loop turns).
 * - Our own exit first waits for the write queue to empty.
 */
import type {Writable} from 'node:stream';

const outputs = (): Writable[] => [process.stdout, process.stderr];

interface WithHandle {
	_handle?: {setBlocking?: (blocking: boolean) => number};
}

/** Makes stdout and stderr block when they are pipes; a TTY or file already does. */
export function blockOutput(): void {
	for (const stream of outputs()) {
		(stream as unknown as WithHandle)._handle?.setBlocking?.(true);
	}
}

/** Resolves once everything written to stdout and stderr so far has left this process. */
export async function flushOutput(): Promise<void> {
	await Promise.all(outputs().map(async stream => new Promise<void>(resolve => {
		if (stream.writableLength === 0 || stream.destroyed || !stream.writable) {
			resolve();
			return;
		}

		// Write callbacks come in order: this one means every earlier write is out.
		stream.write('', () => {
			resolve();
		});
	})));
}
