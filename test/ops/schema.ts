/**
 * A small structural schema for the deployment files' parsed forms (YAML, unit files): required
 * keys and their types, `?key` for optional ones, `[schema]` for an array of that. Enough to say
 * which field of a manifest is missing or mistyped without a Kubernetes API server.
 */
export type Schema =
  | 'string'
  | 'integer'
  | 'boolean'
  | 'any'
  | readonly [Schema]
  | { readonly [key: string]: Schema };

/** The violations of `schema` by `value`, each naming its path; empty when it conforms. */
export function schemaErrors(value: unknown, schema: Schema, path = '$'): string[] {
  if (schema === 'any') return value === undefined ? [`${path}: missing`] : [];
  if (schema === 'string') return typeof value === 'string' ? [] : [`${path}: not a string`];
  if (schema === 'boolean') return typeof value === 'boolean' ? [] : [`${path}: not a boolean`];
  if (schema === 'integer') return Number.isInteger(value) ? [] : [`${path}: not an integer`];
  if (Array.isArray(schema)) {
    if (!Array.isArray(value) || value.length === 0) return [`${path}: not a non-empty array`];
    return value.flatMap((item, i) => schemaErrors(item, schema[0] as Schema, `${path}[${i}]`));
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return [`${path}: not an object`];
  }
  const record = value as Record<string, unknown>;
  return Object.entries(schema).flatMap(([key, sub]) => {
    const optional = key.startsWith('?');
    const name = optional ? key.slice(1) : key;
    if (record[name] === undefined) return optional ? [] : [`${path}.${name}: missing`];
    return schemaErrors(record[name], sub, `${path}.${name}`);
  });
}

/** A Kubernetes quantity ("256Mi", "4Gi", "500M") in bytes. */
export function quantityBytes(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(text);
  if (match === null) throw new Error(`not a quantity: ${text}`);
  const unit = match[2] ?? '';
  const scale: Record<string, number> = {
    '': 1,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
  };
  return Number(match[1]) * scale[unit]!;
}
