/**
 * pino, loaded when first asked for (logger.ts). CommonJS on purpose: a
 * `require()` inside a function is how a load can wait for its first use and
 * still be synchronous, and the bundle (scripts/bundle.js) keeps pino's code in
 * memory from the start, running it only at that first call. So a worker that
 * starts its first log line in a drain, long after its release directory was
 * deleted, reads nothing from disk.
 */
import type * as Pino from 'pino';

let loaded: typeof Pino.pino | undefined;

export function loadPino(): typeof Pino.pino {
	loaded ??= (require('pino') as typeof Pino).pino;
	return loaded;
}
