/**
 * A worker's stdout and stderr on the way out. Under the CLI they are pipes to the
 * primary, and a pipe write that does not fit is queued in this process, which
 * `process.exit()` throws away: a hook printing 50,000 lines lost all but about 2,000.
 * So from the drain on the pipes block, and our own exit waits for the queue to empty.
 */
import type {Writable} from 'node:stream';

const outputs = (): Writable[] => [process.stdout, process.stderr];

interface WithHandle {
	_handle?: {setBlocking?: (blocking: boolean) => number};
}

/** A TTY or file already blocks. */
export function blockOutput(): void {
	for (const stream of outputs()) {
		(stream as unknown as WithHandle)._handle?.setBlocking?.(true);
	}
}

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
