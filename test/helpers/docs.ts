// The docs as the tests read them: README.md and docs/*.md, their sections,
// their headings' anchors (as GitHub makes them) and their relative links.
import {readdirSync, readFileSync} from 'node:fs';
import path from 'node:path';
import {ROOT} from './cluster.js';

/** README.md and every docs/*.md, as paths relative to the repository root. */
export function docFiles(): string[] {
	return ['README.md', ...readdirSync(path.join(ROOT, 'docs')).filter(name => name.endsWith('.md')).sort().map(name => `docs/${name}`)];
}

export const readDoc = (file: string): string => readFileSync(path.join(ROOT, file), 'utf8');

/** The text outside fenced code blocks: a `# comment` in a YAML block is not a heading. */
function prose(text: string): string[] {
	let fenced = false;
	return text.split('\n').filter(line => {
		if (/^\s*```/.test(line)) {
			fenced = !fenced;
			return false;
		}

		return !fenced;
	});
}

/**
 * The section under a heading (`## Logs`), up to the next heading of the same
 * level or above. Throws when the heading is missing, so a renamed section
 * fails its test by name instead of passing on an empty string.
 */
export function section(text: string, heading: string): string {
	const level = /^#+/.exec(heading)![0].length;
	const lines = text.split('\n');
	const start = lines.indexOf(heading);
	if (start === -1) {
		throw new Error(`no "${heading}" heading`);
	}

	const end = lines.findIndex((line, index) => index > start && new RegExp(`^#{1,${level}} `).test(line));
	return lines.slice(start, end === -1 ? undefined : end).join('\n');
}

/**
 * GitHub's anchor for a heading: lower case, links reduced to their text, every
 * character but letters, digits, `-`, `_` and spaces dropped, spaces to `-`.
 */
export function slug(heading: string): string {
	return heading
		.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
		.trim()
		.toLowerCase()
		.replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
		.replaceAll(' ', '-');
}

/** Every anchor a page has, a repeated heading's with GitHub's `-1`, `-2` suffixes. */
export function anchors(text: string): Set<string> {
	const found = new Set<string>();
	const seen = new Map<string, number>();
	for (const line of prose(text)) {
		const heading = /^#{1,6} (.+?)#*\s*$/.exec(line);
		if (heading) {
			const base = slug(heading[1]!);
			const count = seen.get(base) ?? 0;
			seen.set(base, count + 1);
			found.add(count === 0 ? base : `${base}-${count}`);
		}
	}

	return found;
}

/** The targets of the page's Markdown links that stay in the repository (no scheme). */
export function relativeLinks(text: string): string[] {
	const targets: string[] = [];
	for (const line of prose(text)) {
		// Inline code is not a link: `[a](b)` in backticks stays text.
		const outsideCode = line.replace(/`[^`]*`/g, '``');
		for (const match of outsideCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
			const target = match[1]!;
			if (!/^[a-z][a-z\d+.-]*:/i.test(target)) {
				targets.push(target);
			}
		}
	}

	return targets;
}
