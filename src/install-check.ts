/**
 * Whether the package's own files are all there, as the build wrote them.
 *
 * The bundle lists its code files with their sizes
 * (`graceful-cluster-files.json`, written by scripts/bundle.js). A partial or
 * truncated copy of the package (part of dist/ copied into an image, a file
 * cut short by a full disk) would otherwise show late: a missing worker chunk
 * as every worker crashing at start, or a chunk that loads only at the drain
 * as a worker throwing then, and cutting its requests. The primary checks
 * every file before its first fork
 * (main.ts), and attach() the worker's own build (worker/index.ts), which may
 * be the app's copy of the package rather than the CLI's.
 *
 * The compiled tree (dist/src/) has no list: nothing to check there.
 */
import {readFileSync, statSync} from 'node:fs';
import {fileURLToPath} from 'node:url';

/**
 * What is wrong with the files `list` names (those under `under` only), one
 * phrase each: missing, or not the size the build wrote. Empty when all is well
 * or when there is no list.
 */
export function damagedFiles(list: URL, under = ''): string[] {
	let sizes: Record<string, number>;
	try {
		const parsed = JSON.parse(readFileSync(list, 'utf8')) as {package?: unknown; files?: Record<string, number>};
		// A file of that name that is not ours (the helper bundled into an app's own
		// build, beside the app's files) says nothing about this package.
		if (parsed?.package !== 'graceful-cluster' || typeof parsed.files !== 'object' || parsed.files === null) {
			return [];
		}

		sizes = parsed.files;
	} catch {
		// None (the compiled tree), or not JSON: not ours to judge by.
		return [];
	}

	const damaged: string[] = [];
	for (const [file, size] of Object.entries(sizes)) {
		if (!file.startsWith(under)) {
			continue;
		}

		const path = fileURLToPath(new URL(file, list));
		const found = statSync(path, {throwIfNoEntry: false});
		if (found === undefined) {
			damaged.push(`${path} (missing)`);
		} else if (found.size !== size) {
			damaged.push(`${path} (${found.size} bytes; the build wrote ${size})`);
		}
	}

	return damaged;
}
