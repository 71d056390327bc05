"""edgesmith.compress"""
