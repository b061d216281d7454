"""The drills family (DESIGN.md §5): fault injection for failure drills, platform admins only, and
refused unless `serving.fault_injection` is on."""
