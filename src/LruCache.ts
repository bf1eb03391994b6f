/** A small least-recently-used map (Map keeps insertion order). */
export const lruCache = <V>(capacity: number) => {
  const entries = new Map<string, V>()
  return {
    get: (key: string): V | undefined => {
      const value = entries.get(key)
      if (value !== undefined) {
        entries.delete(key)
        entries.set(key, value)
      }
      return value
    },
    set: (key: string, value: V) => {
      if (capacity <= 0) return
      entries.delete(key)
      entries.set(key, value)
      if (entries.size > capacity) entries.delete(entries.keys().next().value!)
    }
  }
}
