"""edgesmith.pipeline"""
