/**
 * parseArgs on plain arrays with a given environment (yargs' `.env()` reads
 * process.env): the developer's own GRACEFUL_CLUSTER_* are out of the way
 * meanwhile, and everything is put back after.
 */
import {parseArgs} from '../../src/args.js';
import type {PrimaryOptions} from '../../src/primary/options.js';
import {ROOT} from './cluster.js';

export function parseOptions(argv: readonly string[], env: Record<string, string> = {}): PrimaryOptions {
	const saved = {...process.env};
	for (const key of Object.keys(process.env)) {
		if (key.startsWith('GRACEFUL_CLUSTER_')) {
			delete process.env[key];
		}
	}

	Object.assign(process.env, env);
	try {
		const result = parseArgs(argv, ROOT);
		if (result.kind !== 'run') {
			throw new Error('expected options');
		}

		return result.options;
	} finally {
		// Deleted, not replaced: yargs keeps the process.env object it first saw.
		for (const key of Object.keys(env)) {
			delete process.env[key];
		}

		Object.assign(process.env, saved);
	}
}
