/**
 * Durations as people write them in manifests: `500ms`, `20s`, `2m`, `1h`, or a
 * bare number of seconds (Kubernetes' `terminationGracePeriodSeconds` style).
 * Returns milliseconds, or undefined when the text is not a duration.
 */
const UNIT_MS: Record<string, number> = {ms: 1, s: 1000, m: 60_000, h: 3_600_000};
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/;

export function parseDuration(text: string): number | undefined {
	const match = DURATION.exec(text.trim());
	if (!match) {
		return undefined;
	}

	const ms = Number(match[1]) * UNIT_MS[match[2] ?? 's']!;
	return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

/** `90000` -> `90s`, `1500` -> `1500ms`: how we print durations back in logs and errors. */
export function formatDuration(ms: number): string {
	return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}
