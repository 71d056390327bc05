"""edgesmith.convert"""
